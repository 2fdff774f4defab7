"""A causal-lm checkpoint of format 2 (an earlier trainer's: each block's attn.qkv rows, and AdamW's moments of them,
query-key-value-major) still resumes: on CPU with gloo, it loads into the head-major model and optimizer state that
was saved, and trains on under DDP and under tensor parallelism to the same losses and weights as an uninterrupted
run.

The format-2 checkpoint is made from one this trainer wrote (2 processes, FSDP, after 2 steps, through
layouts_worker.py): its shards are read whole, each qkv tensor's rows (the weight's and bias's, and their exp_avg and
exp_avg_sq) put back in the earlier query-key-value-major order, written again as torch.distributed.checkpoint
shards, and its commit record says format 2 for a causal-lm run, as the earlier trainer's did.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from schemas.model_presets import GptPreset, get_preset
from tests.integration.trainer.test_layouts import LOSS_RTOL, WEIGHT_ATOL, max_difference, result
from tests.trainer_runner import finish, start_processes

STEP_DIR = "step-000000002"


def launch(out: Path, processes: int, *args: str) -> list[subprocess.Popen]:
    argv = [sys.executable, "-m", "tests.integration.trainer.layouts_worker", "--out", str(out), *args]
    return start_processes(argv, processes)


def n_head() -> int:
    preset = get_preset("gpt-tiny")
    assert isinstance(preset, GptPreset)
    return preset.n_head


def query_key_value_major(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """The earlier trainer's qkv row order (all queries, all keys, all values) of a head-major tensor."""
    if not name.endswith(("attn.qkv.weight", "attn.qkv.bias")):
        return tensor
    heads, rest = n_head(), tensor.shape[1:]
    return tensor.view(heads, 3, tensor.shape[0] // (3 * heads), *rest).transpose(0, 1).reshape(tensor.shape)


def downgrade(folder: Path) -> None:
    """Rewrite the checkpoint in folder as the earlier trainer's format 2."""
    from torch.distributed.checkpoint import format_utils

    whole = folder.parent / "whole.pt"
    format_utils.dcp_to_torch_save(str(folder), str(whole))
    state: dict[str, Any] = torch.load(whole, weights_only=False)
    model, moments = state["model"], state["optim"]["state"]
    assert any(name.endswith("attn.qkv.weight") for name in model)
    for name in list(model):
        model[name] = query_key_value_major(name, model[name])
    for name, entry in moments.items():
        for key in ("exp_avg", "exp_avg_sq"):
            entry[key] = query_key_value_major(name, entry[key])
    for shard in [*folder.glob("*.distcp"), folder / ".metadata"]:
        shard.unlink()
    torch.save(state, whole)
    format_utils.torch_save_to_dcp(str(whole), str(folder))
    whole.unlink()
    commit = folder / "commit.json"
    record = json.loads(commit.read_text())
    record["format"] = 2
    record["config"] = {**record["config"], "task": "causal-lm", "model": "gpt-tiny"}
    commit.write_text(json.dumps(record))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """DDP x2 for 4 steps; FSDP x2 saved at step 2 and made format 2; that checkpoint loaded (no step), and resumed
    to step 4 under DDP x2 and under tensor parallelism 2."""
    root = tmp_path_factory.mktemp("upgrade")
    checkpoints = root / "checkpoints"
    outs = {name: root / name.replace(" ", "_") for name in ("uninterrupted", "saved", "loaded", "ddp x2", "tp2")}
    finish(launch(outs["uninterrupted"], 2))
    saving = ("--strategy", "fsdp", "--save-at", "2", "--checkpoints", str(checkpoints), "--optimizer")
    finish(launch(outs["saved"], 2, *saving))
    downgrade(checkpoints / STEP_DIR)
    resume = ("--resume", "--checkpoints", str(checkpoints))
    finish(launch(outs["loaded"], 2, *resume, "--steps", "2", "--optimizer"))
    finish(launch(outs["ddp x2"], 2, *resume))
    finish(launch(outs["tp2"], 2, *resume, "--tensor-parallel", "2"))
    return outs


@pytest.mark.slow
def test_a_format_2_checkpoint_loads_the_head_major_weights_and_adamw_state(runs: dict[str, Path]) -> None:
    _, saved = result(runs["saved"])
    got, loaded = result(runs["loaded"])
    assert got["first_step"] == 2 and got["losses"] == []
    assert set(loaded) == set(saved)
    for name, tensor in saved.items():
        assert torch.equal(loaded[name], tensor), name
    # the checkpoint held the earlier order: read as it is, the qkv rows would differ
    qkv = "blocks.0.attn.qkv.weight"
    assert not torch.equal(query_key_value_major(qkv, saved[qkv]), saved[qkv])
    want = torch.load(runs["saved"] / "optimizer.pt", weights_only=True)["state"]
    have = torch.load(runs["loaded"] / "optimizer.pt", weights_only=True)["state"]
    assert set(have) == set(want)
    for name, entry in want.items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(have[name][key], entry[key]), f"{name}.{key}"


@pytest.mark.slow
@pytest.mark.parametrize("resumed", ["ddp x2", "tp2"])
def test_a_format_2_checkpoint_trains_on_as_the_uninterrupted_run(runs: dict[str, Path], resumed: str) -> None:
    uninterrupted, final = result(runs["uninterrupted"])
    saved, _ = result(runs["saved"])
    assert saved["losses"] == pytest.approx(uninterrupted["losses"][:2], rel=LOSS_RTOL)
    got, weights = result(runs[resumed])
    assert got["first_step"] == 2
    assert got["losses"] == pytest.approx(uninterrupted["losses"][2:], rel=LOSS_RTOL)
    assert max_difference(weights, final) < WEIGHT_ATOL
