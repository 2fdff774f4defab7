"""A checkpoint reshards: written by 2 processes under FSDP (FULL_SHARD) after a few AdamW steps, it loads into 1
process, into 4 processes under FSDP, and into 2 under DDP and under ZeRO-1, each ending with the very model and
optimizer state that was saved (full state dicts gathered to rank 0, compared exactly). On CPU with gloo; the
worker (reshard_worker.py) uses the trainer's own store and state-dict code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer_runner import finish, start_processes

LOADS = {"fsdp x1": ("fsdp", 1), "fsdp x4": ("fsdp", 4), "ddp x2": ("ddp", 2), "zero1 x2": ("zero1", 2)}


def launch(mode: str, strategy: str, processes: int, checkpoints: Path | str, out: Path) -> list[subprocess.Popen]:
    argv = [
        sys.executable,
        "-m",
        "tests.integration.trainer.reshard_worker",
        mode,
        "--strategy",
        strategy,
        "--checkpoints",
        str(checkpoints),
        "--out",
        str(out),
    ]
    return start_processes(argv, processes)


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The state saved by 2 FSDP processes, and the state each load ended with."""
    root = tmp_path_factory.mktemp("resharding")
    checkpoints = root / "checkpoints"
    finish(launch("save", "fsdp", 2, checkpoints, root / "saved.pt"))
    loads = {name: launch("load", s, n, checkpoints, root / f"{name}.pt") for name, (s, n) in LOADS.items()}
    for procs in loads.values():
        finish(procs)
    names = ["saved", *LOADS]
    return {name: torch.load(root / f"{name}.pt", weights_only=True) for name in names}


def assert_same(got: Any, want: Any, where: str) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), where
        assert got.dtype == want.dtype and torch.equal(got, want), where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{where}: {sorted(got)} != {sorted(want)}"
        for key in want:
            assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


@pytest.mark.slow
@pytest.mark.parametrize("load", list(LOADS))
def test_a_two_process_fsdp_checkpoint_loads_into_any_world_size_and_strategy(
    states: dict[str, dict[str, Any]], load: str
) -> None:
    saved = states["saved"]
    assert len(saved["model"]) > 4 and len(saved["optim"]["state"]) == len(saved["model"])
    assert all(float(v["step"]) == 3 for v in saved["optim"]["state"].values())  # AdamW state after 3 steps
    assert_same(states[load]["model"], saved["model"], f"{load} model")
    assert_same(states[load]["optim"], saved["optim"], f"{load} optimizer")


def test_the_loads_start_from_other_weights(states: dict[str, dict[str, Any]]) -> None:
    """The loads build their model from another seed: matching the saved state means the checkpoint was read."""
    torch.manual_seed(8)
    from trainer.models.factory import build_model

    fresh = build_model("gpt-tiny", "causal-lm", {}, False).state_dict()
    assert any(not torch.equal(fresh[k], v) for k, v in states["saved"]["model"].items())


@pytest.mark.slow
def test_a_checkpoint_written_straight_to_the_bucket_reshards_too(gcs_emulator, tmp_path: Path) -> None:
    """On fake-gcs-server: each of 2 FSDP processes streams its shard to its own object; 1 process reads them."""
    import uuid

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    bucket = gcs.Client(project="landfall-local", credentials=AnonymousCredentials()).create_bucket(
        f"reshard-{uuid.uuid4().hex[:10]}"
    )
    checkpoints = f"gs://{bucket.name}/run/checkpoints"
    finish(launch("save", "fsdp", 2, checkpoints, tmp_path / "saved.pt"))
    names = {b.name.rsplit("/", 1)[-1] for b in bucket.list_blobs(prefix="run/checkpoints/step-000000003/")}
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "resume.pt", "commit.json"} <= names
    finish(launch("load", "ddp", 1, checkpoints, tmp_path / "loaded.pt"))
    saved, loaded = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("saved", "loaded"))
    assert_same(loaded["model"], saved["model"], "model")
    assert_same(loaded["optim"], saved["optim"], "optimizer")
