"""The trainer's storage client follows STORAGE_EMULATOR_HOST as it is now, not as it was at the first call.

A test session ran the integration suite's fake-gcs-server, then the whole stack's: load_model reached the first
server (404) through a client cached for the whole process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainer import storage


def test_one_client_per_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:4443")
    first = storage.client()
    assert storage.client() is first
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:5553")
    second = storage.client()
    assert second is not first
    assert "5553" in second._connection.API_BASE_URL and "4443" in first._connection.API_BASE_URL


def test_the_launcher_gives_the_built_in_trainers_processes_one_data_folder_and_removes_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A node's processes share one folder of downloaded shards (trainer/storage.py), which ends with them."""
    from trainer import launcher
    from trainer.distributed import NodeTopology

    seen: list[str] = []

    def run_node(topology: NodeTopology, argv: list[str], environ: dict[str, str]) -> int:
        folder = environ[storage.DATA_CACHE_ENV]
        assert os.path.isdir(folder) and argv == ["--epochs=1"] and environ["KEPT"] == "yes"
        seen.append(folder)
        return 3

    monkeypatch.setattr(launcher, "run_node", run_node)
    topology = NodeTopology(
        node_rank=0, num_nodes=1, nproc_per_node=1, master_addr=None, master_port=None, source="single"
    )
    assert launcher._run_builtin(topology, ["--epochs=1"], {"KEPT": "yes"}) == 3
    assert len(seen) == 1 and not os.path.exists(seen[0])
    disk = tmp_path / "disk"  # the replica's disk the Vertex emulator names
    disk.mkdir()
    assert launcher._run_builtin(topology, ["--epochs=1"], {"KEPT": "yes", "LANDFALL_WORK_DIR": str(disk)}) == 3
    assert os.path.dirname(seen[1]) == str(disk) and list(disk.iterdir()) == []
