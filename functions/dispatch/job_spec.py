"""Builds the Vertex AI CustomJob (as a plain dict the SDK accepts) for a planned run. Pure: no I/O.

Every replica runs the trainer image (settings.trainer_image, built from trainer/Dockerfile) through container_spec:
the image's ENTRYPOINT is `python -m trainer.task` and the spec passes only the trainer's arguments. Vertex's
prebuilt PyTorch images (python_package_spec) stop at Python 3.10 and torch 2.4, which the trainer does not run on.
"""

from __future__ import annotations

import re
from typing import Any

from functions.gcp.vertex import RUN_LABEL
from functions.settings import Settings
from schemas.training_request import TrainingRequest

REDUCTION_SERVER_IMAGE = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
_LABEL_OK = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE_OK = re.compile(r"^[a-z0-9_-]{0,63}$")


def output_bucket(settings: Settings, region: str | None = None) -> str:
    """The bucket a job in region writes to: that region's artifacts bucket when the deployment made one, else
    settings.output_bucket."""
    return dict(settings.artifact_buckets).get(region or "", settings.output_bucket)


def output_dir(settings: Settings, run_id: str, region: str | None = None) -> str:
    return f"gs://{output_bucket(settings, region)}/{settings.runs_prefix}{run_id}/"


def artifacts(settings: Settings, run_id: str, region: str | None = None) -> dict[str, str]:
    """Where Vertex points AIP_MODEL_DIR and friends for this run's base_output_directory."""
    base = output_dir(settings, run_id, region)
    return {"output_dir": base, "model_dir": f"{base}model/", "checkpoint_dir": f"{base}checkpoints/",
            "tensorboard_dir": f"{base}logs/"}


def trainer_args(request: TrainingRequest, plan: dict[str, Any]) -> list[str]:
    h = request.hyperparameters
    args = [
        f"--data-uri={request.dataset.uri}",
        f"--task={request.task}",
        f"--model={request.model.preset}",
        f"--epochs={h.epochs}",
        f"--batch-size={h.batch_size}",
        f"--learning-rate={h.learning_rate}",
        f"--seed={h.seed}",
        f"--strategy={plan.get('strategy') or 'ddp'}",
        f"--precision={plan.get('precision') or 'auto'}",
        f"--label-column={request.model.label_column}",
    ]
    if h.checkpoint_every_steps:
        args.append(f"--checkpoint-every={h.checkpoint_every_steps}")
    if h.max_steps:
        args.append(f"--max-steps={h.max_steps}")
    for key, value in sorted(h.extra.items()):
        args += ["--hparam", f"{key}={value}"]
    return args


def job_labels(request: TrainingRequest, run_id: str) -> dict[str, str]:
    """Landfall's own labels plus the request's labels that satisfy Vertex's label rules (others are skipped)."""
    labels = {k: v for k, v in request.labels.items() if _LABEL_OK.match(k) and _LABEL_VALUE_OK.match(v)}
    labels.update({RUN_LABEL: run_id, "landfall": "run"})
    return dict(list(labels.items())[-64:])


def custom_job(request: TrainingRequest, plan: dict[str, Any], settings: Settings, run_id: str) -> dict[str, Any]:
    """The CustomJob for plan: pool 0 the primary, pool 1 the other nodes, pool 2 Reduction Server when planned."""
    accelerator = plan.get("accelerator_type") or ""
    count = int(plan.get("accelerator_count") or 0)
    machine: dict[str, Any] = {"machine_type": plan["machine_type"]}
    if accelerator and count:
        machine.update(accelerator_type=accelerator, accelerator_count=count)
    container = {"image_uri": settings.trainer_image, "args": trainer_args(request, plan)}
    disk = {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": 100}
    pools: list[dict[str, Any]] = [
        {"machine_spec": machine, "replica_count": 1, "disk_spec": disk, "container_spec": container}
    ]
    replicas = int(plan.get("replica_count") or 1)
    reducers = int(plan.get("reduction_server_replicas") or 0)
    if replicas > 1 or reducers:
        pools.append({"machine_spec": machine, "replica_count": replicas - 1, "disk_spec": disk,
                      "container_spec": container} if replicas > 1 else {})
    if reducers:
        pools.append({"machine_spec": {"machine_type": plan.get("reduction_server_machine_type") or "n1-highcpu-16"},
                      "replica_count": reducers, "container_spec": {"image_uri": REDUCTION_SERVER_IMAGE}})
    job_spec: dict[str, Any] = {
        "worker_pool_specs": pools,
        "base_output_directory": {"output_uri_prefix": output_dir(settings, run_id, plan.get("region"))},
    }
    if settings.training_service_account:
        job_spec["service_account"] = settings.training_service_account
    if plan.get("spot"):
        job_spec["scheduling"] = {"strategy": "SPOT", "restart_job_on_worker_restart": False}
    return {"display_name": f"landfall-{run_id}", "labels": job_labels(request, run_id), "job_spec": job_spec}
