"""The one place that reads how this process was launched and sets up (and always tears down) torch.distributed.

Two launch contracts arrive here:
- Vertex AI: one process per node (replica) with RANK = node rank, WORLD_SIZE = number of nodes, MASTER_ADDR /
  MASTER_PORT of the primary and CLUSTER_SPEC (JSON). The trainer starts the per-node processes itself
  (trainer/launcher.py), one per GPU, or LANDFALL_NPROC_PER_NODE on a CPU machine.
- torchrun (or our own launcher's children): LOCAL_RANK is set and RANK / WORLD_SIZE are global.
The rest of the trainer sees only the frozen records below and never branches on how it was launched.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainer.errors import ConfigError

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

# Pools that run trainer replicas: 0 = primary, 1 = workers. Pool 2 (reduction server) and 3 (evaluators) do not.
_TRAINING_POOLS = ("workerpool0", "workerpool1")

_LEFT_GROUPS: list[object] = []
"""The process groups this process has left, held until it exits (see process_group's teardown)."""


@dataclass(frozen=True)
class NodeTopology:
    """What one node (Vertex replica) knows before it starts its processes."""

    node_rank: int
    num_nodes: int
    nproc_per_node: int
    master_addr: str | None
    master_port: int | None
    source: str
    """'vertex' (RANK/WORLD_SIZE or CLUSTER_SPEC), or 'single' (no distributed environment at all)."""

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.nproc_per_node

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank


@dataclass(frozen=True)
class DistEnv:
    """One training process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    master_addr: str | None
    master_port: int | None

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True)
class Layout:
    """How the processes share the model: a (pipeline, data, tensor) grid of world_size processes.

    Ranks fill the grid tensor-fastest (rank = (pp x dp_degree + dp) x tp_degree + tp), as init_device_mesh lays
    out (pp, dp, tp): a tensor-parallel group is consecutive ranks, inside one machine where it fits; pipeline
    stages are the outermost, across machines. Every rank of a tensor-parallel group and of a pipeline column trains
    the same samples: the data shard is the dp coordinate."""

    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel: int = 1
    sequence_parallel: bool = False
    """Sequence parallelism of the layer norms and residual stream (off: see trainer/model_parallel.py)."""

    @property
    def world_size(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def model_parallel(self) -> bool:
        """Whether a process holds only part of the model's layers or of its matrices."""
        return self.tensor_parallel > 1 or self.pipeline_parallel > 1

    def coordinates(self, rank: int) -> tuple[int, int, int]:
        """(pp, dp, tp) of a global rank."""
        tp = rank % self.tensor_parallel
        dp = (rank // self.tensor_parallel) % self.data_parallel
        return rank // (self.tensor_parallel * self.data_parallel), dp, tp

    def data_rank(self, rank: int) -> int:
        """The data shard a rank trains on (its dp coordinate)."""
        return self.coordinates(rank)[1]

    def counts_data(self, rank: int) -> bool:
        """Whether this rank is the one of its data shard's processes that counts the shard's samples and losses
        (tp 0 on the first stage): sums over every rank then count each sample once."""
        pp, _, tp = self.coordinates(rank)
        return pp == 0 and tp == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "data_parallel": self.data_parallel,
            "sequence_parallel": self.sequence_parallel,
        }


def layout_for(world_size: int, tensor_parallel: int, pipeline_parallel: int) -> Layout:
    """The grid for world_size processes, or a ConfigError saying which process counts would fit."""
    per_replica = tensor_parallel * pipeline_parallel
    if world_size % per_replica:
        fits = ", ".join(str(per_replica * k) for k in range(1, 5))
        raise ConfigError(
            f"--tensor-parallel={tensor_parallel} x --pipeline-parallel={pipeline_parallel} = {per_replica} processes "
            f"hold one copy of the model, which {world_size} processes do not divide: run on a multiple of "
            f"{per_replica} processes ({fits}, ...) or change the two flags"
        )
    return Layout(tensor_parallel, pipeline_parallel, world_size // per_replica)


@dataclass(frozen=True)
class MeshPlace:
    """This process's place in the device mesh, with the groups the model-parallel code talks over."""

    mesh: DeviceMesh
    """init_device_mesh(device_type, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))."""
    layout: Layout
    pp: int
    dp: int
    tp: int
    tied_group: ProcessGroup | None
    """The first and the last pipeline stage of this process's (dp, tp) column, which both hold the tied embedding;
    None on middle stages and without pipelining."""
    host_group: ProcessGroup | None = None
    """A gloo group of every process, for CPU tensors (gathering model.pt); None where the default group is gloo."""

    def group(self, name: str) -> ProcessGroup:
        """The process group of one mesh dimension ("pp", "dp" or "tp") through this process."""
        return self.mesh.get_group(name)

    @property
    def first_stage(self) -> bool:
        return self.pp == 0

    @property
    def last_stage(self) -> bool:
        return self.pp == self.layout.pipeline_parallel - 1


def device_mesh(layout: Layout, device: str) -> MeshPlace:
    """Build the (pp, dp, tp) device mesh over the job's process group (joined by process_group). Collective."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    shape = (layout.pipeline_parallel, layout.data_parallel, layout.tensor_parallel)
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=("pp", "dp", "tp"))
    pp, dp, tp = layout.coordinates(dist.get_rank())
    tied: ProcessGroup | None = None
    if layout.pipeline_parallel > 1:
        last = layout.pipeline_parallel - 1
        columns = [
            [(s * layout.data_parallel + d) * layout.tensor_parallel + t for s in (0, last)]
            for d in range(layout.data_parallel)
            for t in range(layout.tensor_parallel)
        ]
        tied, _ = dist.new_subgroups_by_enumeration(columns)
    host = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    return MeshPlace(mesh, layout, pp, dp, tp, tied, host)


def _int(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"environment variable {name}={raw!r}: expected an integer") from exc


def _from_cluster_spec(raw: str) -> tuple[int, int, str | None, int | None]:
    """(node rank, number of nodes, primary host, primary port) from Vertex's CLUSTER_SPEC JSON."""
    try:
        spec = json.loads(raw)
        cluster = spec["cluster"]
        task = spec["task"]
        pool, index = str(task["type"]), int(task["index"])
        hosts = {name: [str(host) for host in cluster.get(name) or []] for name in _TRAINING_POOLS}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"CLUSTER_SPEC is not Vertex's JSON ({exc}); expected "
            '{"cluster": {"workerpool0": ["host:port"], ...}, "task": {"type": "workerpool0", "index": 0}}'
        ) from exc
    num_nodes = sum(len(hosts[name]) for name in _TRAINING_POOLS)
    if pool not in _TRAINING_POOLS:
        raise ConfigError(f"CLUSTER_SPEC task type {pool!r} does not train; expected one of {_TRAINING_POOLS}")
    node_rank = index if pool == "workerpool0" else index + len(hosts["workerpool0"])
    primary = hosts["workerpool0"][0] if hosts["workerpool0"] else None
    host: str | None = None
    port: int | None = None
    if primary:
        host, _, port_text = primary.rpartition(":")
        port = int(port_text) if port_text.isdigit() else None
    return node_rank, num_nodes, host or None, port


def default_nproc_per_node(environ: Mapping[str, str]) -> int:
    """LANDFALL_NPROC_PER_NODE when set (CPU machines), else one process per visible GPU, else 1."""
    configured = _int(environ, "LANDFALL_NPROC_PER_NODE")
    if configured is not None:
        if configured < 1:
            raise ConfigError(f"LANDFALL_NPROC_PER_NODE={configured}: expected an integer >= 1")
        return configured
    import torch

    return max(1, torch.cuda.device_count())


def read_node_topology(environ: Mapping[str, str], nproc_per_node: int) -> NodeTopology:
    """Vertex's per-node environment (or none at all) as a NodeTopology."""
    node_rank, num_nodes = _int(environ, "RANK"), _int(environ, "WORLD_SIZE")
    addr, port = environ.get("MASTER_ADDR") or None, _int(environ, "MASTER_PORT")
    source = "vertex"
    if environ.get("CLUSTER_SPEC") and (node_rank is None or num_nodes is None):
        spec_rank, spec_nodes, spec_addr, spec_port = _from_cluster_spec(environ["CLUSTER_SPEC"])
        node_rank = spec_rank if node_rank is None else node_rank
        num_nodes = spec_nodes if num_nodes is None else num_nodes
        addr, port = addr or spec_addr, port or spec_port
    if num_nodes is None:
        node_rank, num_nodes, source = 0, 1, "single"
    if node_rank is None:
        raise ConfigError(f"WORLD_SIZE={num_nodes} is set but RANK is not: expected the node rank in RANK")
    if not 0 <= node_rank < num_nodes:
        raise ConfigError(f"RANK={node_rank} is outside 0..{num_nodes - 1} (WORLD_SIZE={num_nodes} nodes)")
    if num_nodes > 1 and (addr is None or port is None):
        raise ConfigError(f"{num_nodes} nodes need MASTER_ADDR and MASTER_PORT (the primary's host and port)")
    return NodeTopology(node_rank, num_nodes, nproc_per_node, addr, port, source)


def launched_per_process(environ: Mapping[str, str]) -> bool:
    """True under torchrun or our own launcher: this process is one rank, not a node to fan out."""
    return environ.get("LOCAL_RANK") not in (None, "")


def read_process_env(environ: Mapping[str, str]) -> DistEnv:
    """The torchrun-style per-process environment (LOCAL_RANK set; RANK and WORLD_SIZE global)."""
    rank, world, local_rank = _int(environ, "RANK"), _int(environ, "WORLD_SIZE"), _int(environ, "LOCAL_RANK")
    if rank is None or world is None or local_rank is None:
        raise ConfigError("LOCAL_RANK is set, so RANK and WORLD_SIZE must be the global rank and process count")
    local_world = _int(environ, "LOCAL_WORLD_SIZE") or 1
    node_rank = _int(environ, "GROUP_RANK")
    if node_rank is None:
        node_rank = rank // local_world
    if not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} is outside 0..{world - 1} (WORLD_SIZE={world} processes)")
    return DistEnv(
        rank,
        world,
        local_rank,
        local_world,
        node_rank,
        environ.get("MASTER_ADDR") or None,
        _int(environ, "MASTER_PORT"),
    )


def single_process_env(topology: NodeTopology) -> DistEnv:
    """The record for a node that runs exactly one process (no fan-out needed)."""
    return DistEnv(
        topology.node_rank, topology.num_nodes, 0, 1, topology.node_rank, topology.master_addr, topology.master_port
    )


def child_environ(topology: NodeTopology, local_rank: int, master_addr: str, master_port: int) -> dict[str, str]:
    """The torchrun-style variables for the local_rank-th process this node starts."""
    return {
        "RANK": str(topology.global_rank(local_rank)),
        "WORLD_SIZE": str(topology.world_size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(topology.nproc_per_node),
        "GROUP_RANK": str(topology.node_rank),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (for a single-node job that has no MASTER_PORT of its own)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def backend_for(cuda_available: bool) -> str:
    """NCCL between GPUs, gloo on CPU."""
    return "nccl" if cuda_available else "gloo"


def _every_group() -> list[Any]:
    """Every process group this process has made (torch keeps them in its private `_world.pg_map`; [] where a
    later torch moves it: the world group is still held)."""
    import torch.distributed.distributed_c10d as c10d

    world = getattr(c10d, "_world", None)
    return list(getattr(world, "pg_map", {}) or {})


@contextlib.contextmanager
def process_group(env: DistEnv) -> Iterator[str]:
    """Join the job's process group (when there is more than one process) and always leave it; yields the device.

    A single process with no distributed environment runs without any process group at all.
    """
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    device = f"cuda:{env.local_rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(env.local_rank)
    if not env.is_distributed:
        yield device
        return
    if env.master_addr is None or env.master_port is None:
        raise ConfigError(f"{env.world_size} processes need MASTER_ADDR and MASTER_PORT")
    dist.init_process_group(
        backend=backend_for(cuda),
        init_method=f"tcp://{env.master_addr}:{env.master_port}",
        rank=env.rank,
        world_size=env.world_size,
        device_id=torch.device(device) if cuda else None,
    )
    try:
        dist.barrier()
        yield device
    finally:
        # DDP's reducer holds the group too. Were it the last holder, freeing the model (the GIL held) would destroy
        # the group and join gloo's worker threads while one of them waits for the GIL to free the last collective's
        # tensors: a deadlock, one process never exiting. Held here to the end, the group goes last, from its Python
        # handle, which lets go of the GIL first (docs/decisions/free-ddp-before-its-process-group.md).
        # The same holds for every group made after it (a DeviceMesh's dimensions, the pipeline's tied-embedding
        # pairs, the host group): DTensors, FSDP and pipeline stages hold them, and the session may be freed after
        # this block. Their handles are kept too, so each goes last, from Python, without the GIL.
        _LEFT_GROUPS.extend(_every_group())
        _LEFT_GROUPS.append(dist.group.WORLD)
        dist.destroy_process_group()
