"""Builds the Vertex AI CustomJob (as a plain dict the SDK accepts) for a planned run. Pure: no I/O.

Every replica runs through container_spec (Vertex's containerSpec: image_uri, command, args, env,
https://cloud.google.com/vertex-ai/docs/training/configure-container-settings), with the contract's environment
(docs/trainer-contract.md: the run id, the data, the batch split, strategy and precision):

- the built-in trainer and a team's script or package: the trainer image built for the plan's GPU (one build per
  CUDA line, deploy/topology.toml [[trainer_image.builds]]: `trainer` for CUDA 12, `trainer-cu130` for B200),
  whose ENTRYPOINT `python -m trainer.launcher` fetches and installs the team's code (LANDFALL_TRAINER_* variables)
  or runs `python -m trainer.task` with the trainer's arguments. One path for both.
  Not python_package_spec: its executor must be one of Vertex's prebuilt images, which stop at Python 3.10 and
  torch 2.4, and the launcher (torchrun-style processes, failure classification, metrics) would not run there;
- a team's container image: that image with its own command and args, the contract's variables in env, and the
  local paths as Cloud Storage FUSE paths (/gcs/BUCKET/...).

The job is a translation of the Plan, nothing decided here: the batch split (--batch-size is the global batch,
--micro-batch-size and --gradient-accumulation-steps what each process does), activation checkpointing, the
scheduling strategy, timeout and wait, restarts for multi-node jobs, the boot disk, the reservation the training
pools consume (machine_spec.reservation_affinity). Only the Reduction Server image
is looked up, for the job's region (schemas/data/vertex_jobs.json).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from deploy.images import trainer_image
from functions.records.canary import CANARY_TIMEOUT_SECONDS, bucket_bytes
from functions.records.model_registration import CHAMPION_DIR_ENV
from functions.settings import Settings
from schemas.canary import (
    CANARY_BUCKET_ENV,
    CANARY_ENV,
    CANARY_FOLDER,
    CANARY_LABEL,
    CANARY_LABEL_VALUE,
    CANARY_STEPS,
    CANARY_STEPS_ENV,
)
from schemas.data_objects import encode_objects
from schemas.gpus import load_gpus, sm_name
from schemas.job_view import RUN_LABEL
from schemas.plan import Plan
from schemas.request_labels import (
    INGEST_LABELS,
    LABEL_PREFIX,
    LANDFALL_JOB_LABELS,
    LANDFALL_LABEL,
    VERTEX_MAX_LABELS,
    is_landfalls,
)
from schemas.trainer_spec import CHECKPOINT_DIR_ENV
from schemas.training_request import TrainingRequest
from schemas.user_metrics import METRICS_LINES_FILE
from schemas.vertex_jobs import load_vertex_jobs

_LABEL_OK = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE_OK = re.compile(r"^[a-z0-9_-]{0,63}$")


def output_bucket(settings: Settings, region: str | None = None) -> str:
    """The bucket a job in region writes to: that region's artifacts bucket when the deployment made one, else
    settings.output_bucket."""
    return dict(settings.artifact_buckets).get(region or "", settings.output_bucket)


def run_folder(settings: Settings, run_id: str, team: str = "") -> str:
    """The run's folder in an artifacts bucket: runs/RUN_ID/, or runs/TEAM/RUN_ID/ for a team's run, whose trainer
    identity writes only under its team's folder (deploy/gcp/team_access.py)."""
    return f"{settings.runs_prefix}{team}/{run_id}/" if team else f"{settings.runs_prefix}{run_id}/"


def output_dir(settings: Settings, run_id: str, region: str | None = None, team: str = "") -> str:
    return f"gs://{output_bucket(settings, region)}/{run_folder(settings, run_id, team)}"


def artifacts(settings: Settings, run_id: str, region: str | None = None, team: str = "") -> dict[str, str]:
    """Where Vertex points AIP_MODEL_DIR and friends for this run's base_output_directory."""
    base = output_dir(settings, run_id, region, team)
    return {
        "output_dir": base,
        "model_dir": f"{base}model/",
        "checkpoint_dir": f"{base}checkpoints/",
        "tensorboard_dir": f"{base}logs/",
    }


def lineage_checkpoints(request: TrainingRequest, settings: Settings, region: str | None = None, team: str = "") -> str:
    """The checkpoint folder of the request's line (gs://: the first run's `checkpoints/`, which every retry of it
    resumes from and writes to), or "" when the run keeps its own (AIP_CHECKPOINT_DIR, base_output_directory's)."""
    if not request.checkpoint_lineage:
        return ""
    return artifacts(settings, request.checkpoint_lineage, region, team)["checkpoint_dir"]


def checkpoint_every(request: TrainingRequest, plan: Plan) -> int:
    """Steps between checkpoints: the request's hyperparameters.checkpoint_every_steps when set, else the plan's
    (from its step time and Spot risk); 0 = neither says (the trainer's default)."""
    return request.hyperparameters.checkpoint_every_steps or plan.checkpoint_every_steps


def checkpoint_every_seconds(request: TrainingRequest, plan: Plan) -> int:
    """Seconds of training between checkpoints, on the clock: the plan's, unless the request counts in steps
    (hyperparameters.checkpoint_every_steps wins); 0 = by steps."""
    return 0 if request.hyperparameters.checkpoint_every_steps else plan.checkpoint_every_seconds


def trainer_args(request: TrainingRequest, plan: Plan) -> list[str]:
    """The trainer's command line (trainer/config.py) for this request as planned."""
    h = request.hyperparameters
    if plan.global_batch_size != h.batch_size:
        raise ValueError(
            f"the plan is for a global batch of {plan.global_batch_size}, the request asks "
            f"{h.batch_size}: plan the request again"
        )
    args = [
        f"--data-uri={request.dataset.uri}",
        f"--task={request.task}",
        f"--model={request.model.preset}",
        f"--epochs={h.epochs}",
        f"--batch-size={h.batch_size}",
        f"--micro-batch-size={plan.micro_batch_size}",
        f"--gradient-accumulation-steps={plan.gradient_accumulation_steps}",
        f"--learning-rate={h.learning_rate}",
        f"--seed={h.seed}",
        f"--strategy={plan.strategy}",
        f"--precision={plan.precision}",
        f"--label-column={request.model.label_column}",
    ]
    if request.dataset.objects_digest:  # the version's snapshot: the trainer reads exactly these objects
        args.append(f"--data-digest={request.dataset.objects_digest}")
    if request.dataset.objects:
        args.append(f"--data-objects={encode_objects(request.dataset.objects)}")
    if plan.activation_checkpointing:
        args.append("--activation-checkpointing")
    if plan.tensor_parallel > 1:
        args.append(f"--tensor-parallel={plan.tensor_parallel}")
    if plan.pipeline_parallel > 1:
        args.append(f"--pipeline-parallel={plan.pipeline_parallel}")
    seconds, every = checkpoint_every_seconds(request, plan), checkpoint_every(request, plan)
    if seconds:
        args.append(f"--checkpoint-every-seconds={seconds}")
    elif every:
        args.append(f"--checkpoint-every={every}")
    if h.max_steps:
        args.append(f"--max-steps={h.max_steps}")
    for key, value in sorted(h.extra.items()):
        args += ["--hparam", f"{key}={value}"]
    return args


DATA_FILES_NAME = "data-files.jsonl"
"""The dataset version's objects (JSON lines: name, generation, size), in the run's output folder."""
FUSE_ROOT = "/gcs/"
"""Vertex mounts Cloud Storage at /gcs/BUCKET/ in every replica (Cloud Storage FUSE)."""


def contract_env(request: TrainingRequest, plan: Plan, run_id: str) -> dict[str, str]:
    """The plan as environment variables, for every form (docs/trainer-contract.md)."""
    env = {
        "LANDFALL_RUN_ID": run_id,
        "LANDFALL_DATA_URI": request.dataset.uri,
        "LANDFALL_GLOBAL_BATCH_SIZE": str(plan.global_batch_size),
        "LANDFALL_MICRO_BATCH_SIZE": str(plan.micro_batch_size),
        "LANDFALL_GRADIENT_ACCUMULATION_STEPS": str(plan.gradient_accumulation_steps),
        "LANDFALL_STRATEGY": plan.strategy,
        "LANDFALL_PRECISION": plan.precision,
        # the mesh: tensor x pipeline x data = the processes (a team's code gets a layout above 1 only when its
        # workload.parallelism lists it)
        "LANDFALL_TENSOR_PARALLEL": str(plan.tensor_parallel),
        "LANDFALL_PIPELINE_PARALLEL": str(plan.pipeline_parallel),
        "LANDFALL_DATA_PARALLEL": str(plan.data_parallel),
    }
    every = checkpoint_every(request, plan)
    if every:
        env["LANDFALL_CHECKPOINT_EVERY_STEPS"] = str(every)
    seconds = checkpoint_every_seconds(request, plan)
    if seconds:
        env["LANDFALL_CHECKPOINT_EVERY_SECONDS"] = str(seconds)
    return env


def image_build(plan: Plan) -> str:
    """The trainer build a plan runs on: the first whose kernels run on the plan's GPU (the default build for a
    CPU-only plan). ValueError where none does: the planner never chooses such a GPU for Landfall's images."""
    image = trainer_image()
    if not plan.accelerator_type:
        return image.builds[0].name
    capability = load_gpus().kinds[plan.accelerator_type].compute_capability
    build = image.build_for(capability)
    if build is None:
        raise ValueError(
            f"no trainer image build carries kernels for {plan.accelerator_type} ({sm_name(capability)}); builds: "
            + ", ".join(f"{b.describe()}: {', '.join(map(sm_name, b.compute_capabilities))}" for b in image.builds)
        )
    return build.name


def container(
    request: TrainingRequest,
    plan: Plan,
    settings: Settings,
    run_id: str,
    extra_env: Mapping[str, str] | None = None,
    pins: Mapping[str, str] | None = None,
    team: str = "",
) -> dict[str, Any]:
    """The container_spec of the training pools for the request's trainer form; extra_env: further contract
    variables (the route's champion to score, LANDFALL_CHAMPION_MODEL_DIR: docs/trainer-contract.md); pins: each code
    object's URI -> the URI of the version the run found (`URI#GENERATION`, schemas/code_version.py)."""
    pinned = dict(pins or {})
    t = request.trainer
    env = contract_env(request, plan, run_id) | dict(extra_env or {})
    lineage = lineage_checkpoints(request, settings, plan.region, team)
    if lineage:  # the line's folder instead of AIP_CHECKPOINT_DIR (the trainer and the launcher read this first)
        env[CHECKPOINT_DIR_ENV] = lineage
    if t.builtin:
        spec: dict[str, Any] = {
            "image_uri": settings.trainer_image_for(plan.region, image_build(plan)),
            "args": trainer_args(request, plan),
        }
    elif t.image_uri:
        fuse = FUSE_ROOT + request.dataset.uri.removeprefix("gs://")
        folders = artifacts(settings, run_id, plan.region, team)
        model = FUSE_ROOT + folders["model_dir"].removeprefix("gs://")
        base = FUSE_ROOT + output_dir(settings, run_id, plan.region, team).removeprefix("gs://")
        env |= {
            "LANDFALL_LAUNCH": t.launch,
            "LANDFALL_DATA_DIR": fuse,
            "LANDFALL_MODEL_DIR": model,
            "LANDFALL_METRICS_FILE": model + METRICS_LINES_FILE,
            # AIP_CHECKPOINT_DIR (base_output_directory's checkpoints/), or the line's folder, through the mount
            CHECKPOINT_DIR_ENV: FUSE_ROOT + (lineage or folders["checkpoint_dir"]).removeprefix("gs://"),
            # Written by the dispatcher before the job is created (it lists the dataset first).
            "LANDFALL_DATA_FILES": base + DATA_FILES_NAME,
        }
        if env.get(CHAMPION_DIR_ENV, "").startswith("gs://"):  # through the mount, like the image's other folders
            env[CHAMPION_DIR_ENV] = FUSE_ROOT + env[CHAMPION_DIR_ENV].removeprefix("gs://")
        spec = {"image_uri": t.image_uri, "args": list(t.args)}
        if t.command:
            spec["command"] = list(t.command)
    else:
        base = FUSE_ROOT + output_dir(settings, run_id, plan.region, team).removeprefix("gs://")
        env |= {
            "LANDFALL_TRAINER_FORM": t.form,
            "LANDFALL_LAUNCH": t.launch,
            # Written by the dispatcher before the job is created; the launcher reads it through the mount (or the
            # object it stands for) and points the variable at a local copy.
            "LANDFALL_DATA_FILES": base + DATA_FILES_NAME,
        }
        if t.script:
            env["LANDFALL_TRAINER_SCRIPT"] = pinned.get(t.script, t.script)
        else:
            env["LANDFALL_TRAINER_PACKAGES"] = json.dumps([pinned.get(u, u) for u in t.package_uris])
            env["LANDFALL_TRAINER_MODULE"] = t.python_module
        if t.requirements:
            env["LANDFALL_TRAINER_REQUIREMENTS"] = json.dumps(list(t.requirements))
        spec = {"image_uri": settings.trainer_image_for(plan.region, image_build(plan)), "args": list(t.args)}
    env |= t.env
    spec["env"] = [{"name": name, "value": value} for name, value in env.items()]
    return spec


def job_labels(request: TrainingRequest, run_id: str, *, canary: bool = False) -> dict[str, str]:
    """The job's labels: Landfall's own (LANDFALL_JOB_LABELS: the run's id, and the canary's phase on a canary) always,
    whatever the request says, then the team's own that satisfy Vertex's label rules, as many as fit beside them
    within VERTEX_MAX_LABELS (label_warnings names those left off). A request's `landfall-*` label is never put on the
    job: those are Landfall's, and lookups by them (the run's job, its canary) must find only what Landfall made."""
    own = {LANDFALL_LABEL: "run", RUN_LABEL: run_id}
    if canary:
        own[CANARY_LABEL] = CANARY_LABEL_VALUE
    team = dict(list(_team_labels(request.labels).items())[: VERTEX_MAX_LABELS - len(LANDFALL_JOB_LABELS)])
    return own | team


def _team_labels(labels: Mapping[str, Any]) -> dict[str, str]:
    """The request's labels a job may carry: not Landfall's, and within Vertex's label rules."""
    return {
        str(k): str(v)
        for k, v in labels.items()
        if not is_landfalls(str(k)) and _LABEL_OK.match(str(k)) and _LABEL_VALUE_OK.match(str(v))
    }


def label_warnings(labels: Mapping[str, Any]) -> list[str]:
    """What job_labels left off of a request's labels, as warnings for the run (none for a request within the rules
    parse_training_request holds it to, which refuses Landfall's labels and too many of the team's own)."""
    notes = []
    # ingest's own (INGEST_LABELS) came from Landfall, checked by the dispatcher against the data: nothing was lost
    landfalls = sorted(str(k) for k in labels if is_landfalls(str(k)) and str(k) not in INGEST_LABELS)
    if landfalls:
        notes.append(
            f"labels {', '.join(landfalls)[:200]} not put on the job: keys {LANDFALL_LABEL!r} and {LABEL_PREFIX}* are "
            "Landfall's own, set by Landfall alone"
        )
    room = VERTEX_MAX_LABELS - len(LANDFALL_JOB_LABELS)
    team = list(_team_labels(labels))
    if len(team) > room:
        left = ", ".join(team[room:])[:200]
        notes.append(
            f"{len(team) - room} of the request's {len(team)} labels not put on the job ({left}): "
            f"Vertex AI holds at most {VERTEX_MAX_LABELS} labels on a job, and Landfall's own "
            f"({', '.join(LANDFALL_JOB_LABELS)}) are kept first"
        )
    return notes


def _seconds(value: int) -> dict[str, int]:
    """A google.protobuf.Duration as the SDK takes it in a dict (REST and YAML spell it "3600s")."""
    return {"seconds": value}


def scheduling(plan: Plan) -> dict[str, Any]:
    """Scheduling for the plan: the strategy of its consumption mode (with its wait when the mode waits for capacity),
    timeout, and a whole-job restart when a worker restarts in a multi-node job (a DDP/FSDP process group cannot
    take a worker back)."""
    mode = plan.consumption
    spec: dict[str, Any] = {"strategy": mode.scheduling_strategy}
    if plan.timeout_seconds:
        spec["timeout"] = _seconds(plan.timeout_seconds)
    if mode.waits:
        spec["max_wait_duration"] = _seconds(plan.max_wait_seconds)
    if plan.replica_count > 1 and load_vertex_jobs().restart_multi_node:
        spec["restart_job_on_worker_restart"] = True
    return spec


RESERVATION_KEY = "compute.googleapis.com/reservation-name"
"""ReservationAffinity.key that targets a SPECIFIC_RESERVATION by name (Vertex API reference, MachineSpec)."""


def reservation_affinity(resource_name: str) -> dict[str, Any]:
    """MachineSpec.reservation_affinity consuming exactly this reservation (projects/P/zones/Z/reservations/NAME):
    SPECIFIC_RESERVATION, keyed by name, the value the reservation's full resource name."""
    return {"reservation_affinity_type": "SPECIFIC_RESERVATION", "key": RESERVATION_KEY, "values": [resource_name]}


def custom_job(
    request: TrainingRequest,
    plan: Plan,
    settings: Settings,
    run_id: str,
    extra_env: Mapping[str, str] | None = None,
    pins: Mapping[str, str] | None = None,
    team: str = "",
) -> dict[str, Any]:
    """The CustomJob for plan: pool 0 the primary, pool 1 the other nodes, pool 2 Reduction Server when planned;
    pins: the code versions the run found (container); team: the run's team ("" none): its folder and, where the
    deployment gives teams identities of their own, its service account."""
    rules = load_vertex_jobs()
    machine: dict[str, Any] = {"machine_type": plan.machine_type}
    if plan.accelerator_type and plan.accelerator_count:
        machine.update(accelerator_type=plan.accelerator_type, accelerator_count=plan.accelerator_count)
    if plan.consumption.reserved:  # the training pools consume the reservation; a Reduction Server pool: on demand
        machine["reservation_affinity"] = reservation_affinity(plan.reservation)
    training = container(request, plan, settings, run_id, extra_env, pins, team)
    disk = {"boot_disk_type": plan.boot_disk_type, "boot_disk_size_gb": plan.boot_disk_size_gb}
    pools: list[dict[str, Any]] = [
        {"machine_spec": machine, "replica_count": 1, "disk_spec": disk, "container_spec": training}
    ]
    if plan.replica_count > 1 or plan.reduction_server_replicas:
        pools.append(
            {
                "machine_spec": machine,
                "replica_count": plan.replica_count - 1,
                "disk_spec": disk,
                "container_spec": training,
            }
            if plan.replica_count > 1
            else {}
        )
    if plan.reduction_server_replicas:
        server = plan.reduction_server_machine_type or "n1-highcpu-16"
        server_disk = rules.boot_disk(server)
        pools.append(
            {
                "machine_spec": {"machine_type": server},
                "replica_count": plan.reduction_server_replicas,
                "disk_spec": {"boot_disk_type": server_disk.type, "boot_disk_size_gb": server_disk.size_gb},
                "container_spec": {"image_uri": rules.reduction_server_image(plan.region)},
            }
        )
    job_spec: dict[str, Any] = {
        "worker_pool_specs": pools,
        "scheduling": scheduling(plan),
        "base_output_directory": {"output_uri_prefix": output_dir(settings, run_id, plan.region, team)},
    }
    account = settings.service_account_for(team)
    if account:
        job_spec["service_account"] = account
    return {"display_name": f"landfall-{run_id}", "labels": job_labels(request, run_id), "job_spec": job_spec}


def canary_model_dir(settings: Settings, run_id: str, region: str | None = None, team: str = "") -> str:
    return f"{output_dir(settings, run_id, region, team)}{CANARY_FOLDER}model/"


def canary_job(
    request: TrainingRequest,
    plan: Plan,
    settings: Settings,
    run_id: str,
    pins: Mapping[str, str] | None = None,
    team: str = "",
) -> dict[str, Any]:
    """The run's canary (docs/canary.md): the run's own job, image and code (the same versions: pins) on the planned
    shape, with the canary's variables (a step limit, the all-reduce size), its own output folder and label, and a
    short timeout."""
    job = custom_job(request, plan, settings, run_id, pins=pins, team=team)
    base = output_dir(settings, run_id, plan.region, team)
    fuse_model = FUSE_ROOT + canary_model_dir(settings, run_id, plan.region, team).removeprefix("gs://")
    fuse_checkpoints = FUSE_ROOT + f"{base}{CANARY_FOLDER}checkpoints/".removeprefix("gs://")
    extra = {
        CANARY_ENV: "1",
        CANARY_STEPS_ENV: str(CANARY_STEPS),
        CANARY_BUCKET_ENV: str(bucket_bytes(plan)),
    }
    for pool in job["job_spec"]["worker_pool_specs"][:2]:  # the training pools (pool 2: Reduction Server)
        spec = pool.get("container_spec")
        if not spec:
            continue
        env = {e["name"]: e["value"] for e in spec["env"]} | extra
        env.pop(CHECKPOINT_DIR_ENV, None)  # a canary neither resumes nor writes the line's checkpoints
        if "LANDFALL_MODEL_DIR" in env:  # a container image: its folders through the mount
            env |= {
                "LANDFALL_MODEL_DIR": fuse_model,
                "LANDFALL_METRICS_FILE": fuse_model + METRICS_LINES_FILE,
                CHECKPOINT_DIR_ENV: fuse_checkpoints,
            }
        spec["env"] = [{"name": name, "value": value} for name, value in env.items()]
    job["job_spec"]["base_output_directory"] = {"output_uri_prefix": f"{base}{CANARY_FOLDER}"}
    job["job_spec"]["scheduling"]["timeout"] = _seconds(CANARY_TIMEOUT_SECONDS)
    job["job_spec"]["scheduling"].pop("restart_job_on_worker_restart", None)
    job["display_name"] = f"landfall-{run_id}-canary"
    job["labels"] = job_labels(request, run_id, canary=True)
    return job
