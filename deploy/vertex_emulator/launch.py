"""What to start for each replica of a CustomJob: its name, command line and Vertex environment.

Pure functions over the CustomJob message; nothing here starts a process. The environment follows Vertex's
documentation (vertex.md, "Environment inside each replica"):

- CLUSTER_SPEC: `{"cluster": {"workerpool0": [...], ...}, "environment": "cloud",
  "task": {"type": "workerpool<K>", "index": i, "trial": ""}, "job": <CustomJobSpec as a dict>}`
- TF_CONFIG for multi-replica jobs (pools 0/1/2/3 -> chief/worker/ps/evaluator)
- MASTER_ADDR / MASTER_PORT (the primary's address), WORLD_SIZE (number of nodes in pools 0 and 1),
  RANK (node rank: pool 0 -> 0, pool 1 index i -> i + 1)
- AIP_MODEL_DIR / AIP_CHECKPOINT_DIR / AIP_TENSORBOARD_LOG_DIR from base_output_directory
- CLOUD_ML_JOB_ID, CLOUD_ML_PROJECT_ID
- LANDFALL_NPROC_PER_NODE: the node's accelerator count (1 on a CPU machine type), the number of processes
  the trainer starts on this node when it runs without GPUs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from google.cloud.aiplatform_v1.types import CustomJob, CustomJobSpec, WorkerPoolSpec

from deploy.images import trainer_entrypoint, trainer_image

LOCAL_HOST = "127.0.0.1"
REDUCTION_SERVER_IMAGE_MARK = "reductionserver"
TF_TASK_TYPES = ("chief", "worker", "ps", "evaluator")


@dataclass(frozen=True)
class ReplicaSlot:
    """One replica of one worker pool.

    pool: index of the worker pool (0 = primary, 1 = workers, 2 = parameter/reduction servers, 3 = evaluators).
    index: replica index inside the pool.
    idle: True for a Reduction Server replica, which the emulator accepts but does not run.
    """

    pool: int
    index: int
    idle: bool = False

    @property
    def name(self) -> str:
        """Vertex's task name, e.g. `workerpool1-0`."""
        return f"workerpool{self.pool}-{self.index}"


def is_empty_pool(spec: WorkerPoolSpec) -> bool:
    """An unused pool between used ones is sent as `{}`."""
    return not spec.machine_spec.machine_type and spec.replica_count == 0


def is_reduction_server(pool: int, spec: WorkerPoolSpec) -> bool:
    """Pool 2 running Google's Reduction Server image."""
    return pool == 2 and REDUCTION_SERVER_IMAGE_MARK in spec.container_spec.image_uri


def replica_slots(job_spec: CustomJobSpec) -> list[ReplicaSlot]:
    """Every replica of the job, pool by pool."""
    slots: list[ReplicaSlot] = []
    for pool, spec in enumerate(job_spec.worker_pool_specs):
        if is_empty_pool(spec):
            continue
        idle = is_reduction_server(pool, spec)
        slots.extend(ReplicaSlot(pool, i, idle) for i in range(spec.replica_count))
    return slots


def node_rank(slot: ReplicaSlot) -> int | None:
    """Node rank for the PyTorch variables: pool 0 -> 0, pool 1 index i -> i + 1, other pools none."""
    if slot.pool == 0:
        return 0
    if slot.pool == 1:
        return slot.index + 1
    return None


def spec_as_dict(job_spec: CustomJobSpec) -> dict:
    """The CustomJobSpec as Vertex puts it into CLUSTER_SPEC["job"] (proto field names)."""
    return CustomJobSpec.to_dict(job_spec, use_integers_for_enums=False, always_print_fields_with_no_presence=False)


def output_directories(job_spec: CustomJobSpec) -> dict[str, str]:
    """AIP_* directories derived from base_output_directory, each ending in `/`; empty when it is unset."""
    base = job_spec.base_output_directory.output_uri_prefix
    if not base:
        return {}
    base = base.rstrip("/")
    return {
        "AIP_MODEL_DIR": f"{base}/model/",
        "AIP_CHECKPOINT_DIR": f"{base}/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": f"{base}/logs/",
    }


def pool_env(spec: WorkerPoolSpec) -> dict[str, str]:
    """The `env` entries the pool's container or python package spec asks for."""
    entries = spec.container_spec.env if spec.container_spec.image_uri else spec.python_package_spec.env
    return {entry.name: entry.value for entry in entries}


def replica_environment(
    job: CustomJob,
    *,
    job_id: str,
    project: str,
    slot: ReplicaSlot,
    ports: Mapping[str, int],
    max_nproc_per_node: int | None = None,
) -> dict[str, str]:
    """Vertex's variables for one replica (without the emulator's own environment, which the caller adds).

    ports maps every replica name of the job to a local port; the primary's port is MASTER_PORT.
    max_nproc_per_node caps LANDFALL_NPROC_PER_NODE (the node's accelerator count, or 1 without GPUs).
    """
    job_spec = job.job_spec
    slots = replica_slots(job_spec)
    cluster: dict[str, list[str]] = {}
    for other in slots:
        cluster.setdefault(f"workerpool{other.pool}", []).append(f"{LOCAL_HOST}:{ports[other.name]}")
    cluster_spec = {
        "cluster": cluster,
        "environment": "cloud",
        "task": {"type": f"workerpool{slot.pool}", "index": slot.index, "trial": ""},
        "job": spec_as_dict(job_spec),
    }
    spec = job_spec.worker_pool_specs[slot.pool]
    nodes = sum(1 for other in slots if node_rank(other) is not None)
    nproc = spec.machine_spec.accelerator_count or 1
    if max_nproc_per_node:
        nproc = min(nproc, max_nproc_per_node)
    env = {
        "CLUSTER_SPEC": json.dumps(cluster_spec),
        "MASTER_ADDR": LOCAL_HOST,
        "MASTER_PORT": str(ports[ReplicaSlot(0, 0).name]),
        "WORLD_SIZE": str(nodes),
        "CLOUD_ML_JOB_ID": job_id,
        "CLOUD_ML_PROJECT_ID": project,
        "LANDFALL_NPROC_PER_NODE": str(nproc),
        **output_directories(job_spec),
    }
    rank = node_rank(slot)
    if rank is not None:
        env["RANK"] = str(rank)
    if len(slots) > 1:
        env["TF_CONFIG"] = json.dumps(_tf_config(cluster, slot))
    env.update(pool_env(spec))
    return env


def _tf_config(cluster: Mapping[str, list[str]], slot: ReplicaSlot) -> dict:
    """TF_CONFIG: the same cluster under TensorFlow's task names (evaluators are not part of the cluster)."""
    tf_cluster = {
        TF_TASK_TYPES[int(pool.removeprefix("workerpool"))]: hosts
        for pool, hosts in cluster.items()
        if pool != "workerpool3"
    }
    task_type = TF_TASK_TYPES[slot.pool] if slot.pool < len(TF_TASK_TYPES) else f"workerpool{slot.pool}"
    return {"cluster": tf_cluster, "task": {"type": task_type, "index": slot.index}, "environment": "cloud"}


class LaunchError(ValueError):
    """The replica cannot be started locally; the message is the job's FAILED reason."""


def image_entrypoint(image: str, images: Mapping[str, Sequence[str]] | None = None) -> Sequence[str] | None:
    """The local entrypoint standing in for a container image: the --images file's entry for it, else, for
    Landfall's trainer image (deploy/images.py: any region, project and tag), the ENTRYPOINT of trainer/Dockerfile,
    so the local stack runs the trainer exactly as the container does. None for any other image."""
    if images is not None and image in images:
        return images[image]
    if trainer_image().matches(image):
        return trainer_entrypoint()
    return None


def replica_command(spec: WorkerPoolSpec, images: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """The command line of one replica.

    python_package_spec runs `python -m MODULE ARGS` with the emulator's own interpreter (package_uris are not
    installed: the module must be importable from the working directory or PYTHONPATH). container_spec runs
    `command + args` as given, but only for an image the emulator has a local entrypoint for (image_entrypoint:
    the --images file, or Landfall's trainer image), used when the spec gives no command; `python`/`python3` as the
    first word means the emulator's interpreter.
    """
    if spec.python_package_spec.python_module:
        return [sys.executable, "-m", spec.python_package_spec.python_module, *spec.python_package_spec.args]
    image = spec.container_spec.image_uri
    entrypoint = image_entrypoint(image, images)
    if entrypoint is None:
        raise LaunchError(
            f'The container image "{image}" has no local mapping, so the Vertex emulator cannot run it. '
            "Map the image to a local entrypoint in the emulator's --images file, name Landfall's trainer image "
            f"(<region>-docker.pkg.dev/<project>/{trainer_image().repository}/{trainer_image().name}:<tag>), "
            "or use python_package_spec."
        )
    command = list(spec.container_spec.command) or list(entrypoint)
    if not command:
        raise LaunchError(
            f'The container spec for image "{image}" gives no command and its local mapping has no entrypoint. '
            "Set container_spec.command or an entrypoint for the image in the --images file."
        )
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    stand_in = [sys.executable, "-m", GCS_STAND_IN, "--"] if _wants_gcs_mount(spec) else []
    return [*stand_in, *command, *spec.container_spec.args]


GCS_STAND_IN = "trainer.gcs_stand_in"
"""Stands in for Vertex's Cloud Storage FUSE mount (/gcs/) around a team's container command: stages the dataset
and the model folder locally and copies the model back when the command ends."""


def _wants_gcs_mount(spec: WorkerPoolSpec) -> bool:
    """A team's own image run by Landfall: its contract paths are FUSE paths, which no local machine has."""
    env = {entry.name: entry.value for entry in spec.container_spec.env}
    return env.get("LANDFALL_DATA_DIR", "").startswith("/gcs/") and not trainer_image().matches(
        spec.container_spec.image_uri
    )
