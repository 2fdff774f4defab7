"""The distributed-setup record: Vertex's per-node environment, CLUSTER_SPEC, torchrun's, and none at all."""

from __future__ import annotations

import json

import pytest

from trainer.distributed import (
    NodeTopology,
    backend_for,
    child_environ,
    default_nproc_per_node,
    launched_per_process,
    read_node_topology,
    read_process_env,
    single_process_env,
)
from trainer.errors import ConfigError


def _cluster_spec(task_type: str, index: int, workers: int = 1) -> str:
    cluster = {
        "workerpool0": ["10.0.0.2:2222"],
        "workerpool1": [f"10.0.0.{3 + i}:2222" for i in range(workers)],
        "workerpool2": ["10.0.1.1:2222"],
    }
    return json.dumps(
        {
            "cluster": cluster,
            "environment": "cloud",
            "task": {"type": task_type, "index": index, "trial": ""},
            "job": {},
        }
    )


def test_no_distributed_environment_is_one_single_node() -> None:
    topology = read_node_topology({}, nproc_per_node=1)
    assert topology == NodeTopology(0, 1, 1, None, None, "single")
    env = single_process_env(topology)
    assert (env.rank, env.world_size, env.is_distributed, env.is_main) == (0, 1, False, True)


@pytest.mark.parametrize(("rank", "nproc", "expected_ranks"), [(0, 2, [0, 1]), (1, 2, [2, 3]), (2, 4, [8, 9, 10, 11])])
def test_vertex_node_rank_times_processes_plus_local_rank(rank: int, nproc: int, expected_ranks: list[int]) -> None:
    environ = {"RANK": str(rank), "WORLD_SIZE": "3", "MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "2222"}
    topology = read_node_topology(environ, nproc_per_node=nproc)
    assert topology.world_size == 3 * nproc and topology.source == "vertex"
    children = [child_environ(topology, local, "10.0.0.2", 2222) for local in range(nproc)]
    assert [int(c["RANK"]) for c in children] == expected_ranks
    envs = [read_process_env(c) for c in children]
    assert {e.world_size for e in envs} == {3 * nproc}
    assert [e.local_rank for e in envs] == list(range(nproc)) and {e.node_rank for e in envs} == {rank}
    assert all(launched_per_process(c) for c in children)


def test_cluster_spec_alone_gives_node_rank_and_primary() -> None:
    topology = read_node_topology({"CLUSTER_SPEC": _cluster_spec("workerpool1", 1, workers=2)}, nproc_per_node=1)
    # Pool 2 (reduction server) is not a trainer node: 1 primary + 2 workers = 3 nodes; workerpool1-1 is node 2.
    assert (topology.node_rank, topology.num_nodes) == (2, 3)
    assert (topology.master_addr, topology.master_port) == ("10.0.0.2", 2222)


def test_explicit_rank_wins_over_cluster_spec() -> None:
    environ = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "5",
        "CLUSTER_SPEC": _cluster_spec("workerpool1", 0),
    }
    assert read_node_topology(environ, 1).node_rank == 1


@pytest.mark.parametrize(
    ("environ", "fragment"),
    [
        ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "outside 0..1"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR and MASTER_PORT"),
        ({"WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK is not"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x'"),
        ({"CLUSTER_SPEC": "{not json"}, "CLUSTER_SPEC is not Vertex's JSON"),
        ({"CLUSTER_SPEC": _cluster_spec("workerpool2", 0)}, "does not train"),
    ],
)
def test_bad_environments_are_named(environ: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(".", r"\.")):
        read_node_topology(environ, 1)


def test_torchrun_environment() -> None:
    env = read_process_env(
        {
            "RANK": "5",
            "WORLD_SIZE": "8",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "4",
            "MASTER_ADDR": "h",
            "MASTER_PORT": "29500",
        }
    )
    assert (env.rank, env.world_size, env.local_rank, env.node_rank, env.master_port) == (5, 8, 1, 1, 29500)
    assert env.is_distributed and not env.is_main
    with pytest.raises(ConfigError, match="RANK and WORLD_SIZE"):
        read_process_env({"LOCAL_RANK": "0"})


def test_processes_per_node_and_backend_selection() -> None:
    assert default_nproc_per_node({"LANDFALL_NPROC_PER_NODE": "3"}) == 3
    assert default_nproc_per_node({}) == 1  # no GPU on this machine
    with pytest.raises(ConfigError, match="LANDFALL_NPROC_PER_NODE=0"):
        default_nproc_per_node({"LANDFALL_NPROC_PER_NODE": "0"})
    assert backend_for(cuda_available=True) == "nccl" and backend_for(cuda_available=False) == "gloo"
