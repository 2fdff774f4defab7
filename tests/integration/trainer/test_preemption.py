"""Preemption: a run killed part-way and started again resumes from its newest checkpoint and ends with weights
bit-identical to an uninterrupted run with the same seed (CPU, deterministic)."""

from __future__ import annotations

import json
import signal
from itertools import pairwise
from pathlib import Path

from tests import datagen
from tests.trainer_runner import run_trainer, run_until, same_weights, trainer_args, trainer_env
from trainer.checkpoint import CheckpointStore

INTERVAL = 25


def _outputs(root: Path, **extra: str) -> dict[str, str]:
    return trainer_env(AIP_MODEL_DIR=str(root / "model"), AIP_CHECKPOINT_DIR=str(root / "checkpoints"), **extra)


def test_sigkill_mid_run_resumes_from_newest_checkpoint_and_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    data = datagen.write_csv_shards(tmp_path / "data", shards=3, rows_per_shard=300)
    args = trainer_args(
        str(data),
        epochs=3,
        batch_size=16,
        extra=(
            f"--checkpoint-every={INTERVAL}",
            "--progress-every-seconds=0",
            "--hparam",
            "log_every=1",
            "warmup_steps=10",
        ),
    )

    whole = run_trainer(args, _outputs(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stdout[-2000:] + whole.stderr[-2000:]

    killed_env = _outputs(tmp_path / "killed")
    killed = run_until(
        args, killed_env, lambda r: r.get("message") == "checkpoint saved" and r["step"] >= 2 * INTERVAL, signal.SIGKILL
    )
    assert killed.returncode == -signal.SIGKILL
    last_step = max(r["step"] for r in killed.messages("training"))
    newest = CheckpointStore(str(tmp_path / "killed" / "checkpoints"), keep=3).latest()
    assert newest is not None and newest < whole.messages("training finished")[0]["step"]
    assert not (tmp_path / "killed" / "model" / "metrics.json").exists()

    resumed = run_trainer(args, killed_env)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert resumed.messages("resumed from checkpoint")[0]["step"] == newest
    assert 0 <= last_step - newest <= INTERVAL  # at most one checkpoint interval was done twice
    assert same_weights(tmp_path / "whole" / "model", tmp_path / "killed" / "model")
    whole_metrics = json.loads((tmp_path / "whole" / "model" / "metrics.json").read_text())
    resumed_metrics = json.loads((tmp_path / "killed" / "model" / "metrics.json").read_text())
    assert resumed_metrics["epochs"] == whole_metrics["epochs"]
    assert resumed_metrics["steps"] == whole_metrics["steps"]
    assert (resumed_metrics["resumed_from_step"], whole_metrics["resumed_from_step"]) == (newest, 0)
    # what the kill lost: the steps past the checkpoint, as rank 0 marked them (the kill may fall between a step's
    # log line and its mark)
    lost = resumed_metrics["work_lost_steps"]
    assert last_step - newest - 1 <= lost <= last_step - newest, (lost, last_step, newest)
    assert (resumed_metrics["work_lost_seconds"] > 0) == (lost > 0)
    assert "work_lost_steps" not in whole_metrics


def test_sigterm_checkpoints_fsdp_on_cpu_and_resumes_exactly_and_the_lm_loss_falls(tmp_path: Path) -> None:
    data = tmp_path / "text"
    data.mkdir()
    for shard in range(2):
        (data / f"books-{shard}.txt").write_text(datagen.text_corpus(150, seed=shard))
    args = trainer_args(
        str(data),
        task="causal-lm",
        model="gpt-tiny",
        epochs=2,
        batch_size=4,
        learning_rate=0.003,
        strategy="fsdp",
        extra=("--checkpoint-every=1000", "--hparam", "log_every=5"),
    )

    whole = run_trainer(args, _outputs(tmp_path / "whole", LANDFALL_NPROC_PER_NODE="2"))
    assert whole.returncode == 0, whole.stdout[-2000:] + whole.stderr[-2000:]
    metrics = json.loads((tmp_path / "whole" / "model" / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["strategy"] == "fsdp" and metrics["tokens_per_second"] > 0
    losses = [r["loss"] for r in whole.messages("training")]
    assert losses[-1] < 0.8 * losses[0], losses  # FSDP (gloo) trains the tiny LM: its loss falls
    assert metrics["epochs"][-1]["perplexity"] < metrics["epochs"][0]["perplexity"]
    from trainer.model_io import load_model

    lm = load_model(str(tmp_path / "whole" / "model"))
    continuation = lm.generate("the cat ", max_new_bytes=12)
    assert continuation.startswith("the cat ") and len(continuation.encode()) >= 20

    env = _outputs(tmp_path / "stopped", LANDFALL_NPROC_PER_NODE="2")
    stopped = run_until(args, env, lambda r: r.get("message") == "training" and r["step"] >= 10, signal.SIGTERM)
    assert stopped.returncode == 143, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    saved = stopped.messages("checkpoint saved")
    assert len(saved) == 1  # the interval is 1000 steps: this is the SIGTERM checkpoint
    stop_step = saved[0]["step"]

    resumed = run_trainer(args, env)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert resumed.messages("resumed from checkpoint")[0]["step"] == stop_step  # nothing redone
    assert same_weights(tmp_path / "whole" / "model", tmp_path / "stopped" / "model")


def test_zero1_sharded_optimizer_state_survives_a_sigterm_exactly(tmp_path: Path) -> None:
    """zero1 checkpoints go through ZeroRedundancyOptimizer.consolidate_state_dict: check that path too."""
    data = datagen.write_csv_shards(tmp_path / "data", shards=2, rows_per_shard=160)
    args = trainer_args(
        str(data),
        epochs=2,
        batch_size=16,
        strategy="zero1",
        extra=("--checkpoint-every=1000", "--hparam", "log_every=2"),
    )
    whole = run_trainer(args, _outputs(tmp_path / "whole", LANDFALL_NPROC_PER_NODE="2"))
    assert whole.returncode == 0, whole.stdout[-2000:] + whole.stderr[-2000:]
    env = _outputs(tmp_path / "stopped", LANDFALL_NPROC_PER_NODE="2")
    stopped = run_until(args, env, lambda r: r.get("message") == "training" and r["step"] >= 4, signal.SIGTERM)
    assert stopped.returncode == 143, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    resumed = run_trainer(args, env)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert resumed.messages("resumed from checkpoint")[0]["step"] == stopped.messages("checkpoint saved")[0]["step"]
    assert same_weights(tmp_path / "whole" / "model", tmp_path / "stopped" / "model")


def test_a_checkpoint_of_two_zero1_processes_resumes_in_one_process_under_fsdp(tmp_path: Path) -> None:
    """A capacity fallback changes the world size and the strategy: the sharded checkpoint resumes all the same,
    at the same optimizer step of the epoch (the global batch is kept), with the loss going on from where it was."""
    data = datagen.write_csv_shards(tmp_path / "data", shards=2, rows_per_shard=160)
    extra = ("--checkpoint-every=1000", "--hparam", "log_every=1")
    env = _outputs(tmp_path / "run", LANDFALL_NPROC_PER_NODE="2")
    two = trainer_args(str(data), epochs=2, batch_size=16, strategy="zero1", extra=extra)
    stopped = run_until(two, env, lambda r: r.get("message") == "training" and r["step"] >= 4, signal.SIGTERM)
    assert stopped.returncode == 143, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    stop_step = stopped.messages("checkpoint saved")[0]["step"]
    before = {r["step"]: r["loss"] for r in stopped.messages("training")}

    one = trainer_args(str(data), epochs=2, batch_size=16, strategy="fsdp", extra=extra)
    resumed = run_trainer(one, _outputs(tmp_path / "run"))
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    resumed_from = resumed.messages("resumed from checkpoint")[0]
    assert resumed_from["step"] == stop_step
    assert (resumed_from["world_size_then"], resumed_from["strategy_then"]) == (2, "zero1")
    assert resumed_from["samples_seen"] == stop_step * 16
    after = {r["step"]: r["loss"] for r in resumed.messages("training")}
    assert min(after) == stop_step + 1  # nothing redone, nothing skipped: the next optimizer step
    assert abs(after[stop_step + 1] - before[stop_step]) < 0.5 * abs(before[1] - before[stop_step]) + 0.05
    metrics = json.loads((tmp_path / "run" / "model" / "metrics.json").read_text())
    assert metrics["world_size"] == 1 and metrics["strategy"] == "fsdp" and metrics["steps"] > stop_step


def test_shards_without_their_commit_record_are_not_resumed_from(tmp_path: Path) -> None:
    """A writer that died between its shards and the commit record left no checkpoint: the next job starts over."""
    data = datagen.write_csv_shards(tmp_path / "data", shards=2, rows_per_shard=160)
    args = trainer_args(str(data), epochs=1, batch_size=16, extra=("--checkpoint-every=4", "--hparam", "log_every=1"))
    env = _outputs(tmp_path / "run")
    first = run_trainer(args, env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    steps = CheckpointStore(str(tmp_path / "run" / "checkpoints"), keep=3).complete_steps()
    assert steps, "the first job wrote checkpoints"
    for step in steps:
        (tmp_path / "run" / "checkpoints" / f"step-{step:09d}" / "commit.json").unlink()
    again = run_trainer(args, env)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert not again.messages("resumed from checkpoint")
    assert min(r["step"] for r in again.messages("training")) == 1


def test_early_stoppings_best_weights_survive_a_change_of_world_size(tmp_path: Path) -> None:
    """The copy of the best epoch's weights is in the checkpoint (keyed by the bare model's names) and reads back
    into another number of processes."""
    data = datagen.write_csv_shards(tmp_path / "data", shards=2, rows_per_shard=160)
    patience = ("--hparam", "early_stopping_patience=5", "log_every=1")
    args = trainer_args(str(data), epochs=3, batch_size=16, extra=("--checkpoint-every=20", *patience))
    env = _outputs(tmp_path / "run", LANDFALL_NPROC_PER_NODE="2")
    killed = run_until(args, env, lambda r: r.get("message") == "checkpoint saved" and r["step"] >= 20, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    store = CheckpointStore(str(tmp_path / "run" / "checkpoints"), keep=3)
    step = store.latest()
    assert step is not None and store.record(step).best_weights  # an epoch ended before it: its weights are kept
    resumed = run_trainer(args, _outputs(tmp_path / "run"))
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert resumed.messages("resumed from checkpoint")[0]["step"] == step
    metrics = json.loads((tmp_path / "run" / "model" / "metrics.json").read_text())
    assert metrics["world_size"] == 1 and metrics["early_stopping"]["patience"] == 5


def test_a_clock_interval_checkpoints_by_wall_time_and_every_process_saves_at_the_same_step(tmp_path: Path) -> None:
    """--checkpoint-every-seconds (the plan's interval): checkpoints follow the wall clock whatever the step time,
    and two processes agree on the step (the flag rides the stop signal's all-reduce)."""
    data = tmp_path / "text"
    data.mkdir()
    for shard in range(2):
        (data / f"books-{shard}.txt").write_text(datagen.text_corpus(400, seed=shard))
    args = trainer_args(
        str(data),
        task="causal-lm",
        model="gpt-tiny",
        epochs=20,
        batch_size=4,
        learning_rate=0.003,
        extra=("--max-steps=400", "--checkpoint-every-seconds=1", "--hparam", "val_fraction=0", "keep_checkpoints=100"),
    )
    done = run_trainer(args, _outputs(tmp_path / "run", LANDFALL_NPROC_PER_NODE="2"), timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    saved = [r["step"] for r in done.messages("checkpoint saved")]
    steps = CheckpointStore(str(tmp_path / "run" / "checkpoints"), keep=100).complete_steps()
    seconds = done.messages("training finished")[0].get("train_seconds") or 0
    assert len(saved) >= 2 and saved == sorted(saved) and steps == saved, (saved, steps, seconds)
    assert all(b - a > 1 for a, b in pairwise(saved)), "by the clock, not every step"
