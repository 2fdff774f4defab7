"""Checkpoint store: a checkpoint without its commit record is never loaded; the newest committed one wins; k are
kept; an earlier trainer's single-file checkpoint is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.checkpoint_contract import exercise_checkpoint_store, save
from trainer.checkpoint import CheckpointStore
from trainer.errors import ConfigError


def test_local_directory(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    exercise_checkpoint_store(str(root), lambda: [str(p) for p in root.rglob("*")])


@pytest.mark.parametrize("keep", [1, 3])
def test_keep_last_k(tmp_path: Path, keep: int) -> None:
    store = CheckpointStore(str(tmp_path), keep=keep)
    for step in range(1, 6):
        save(store, step)
    assert store.complete_steps() == list(range(6 - keep, 6))


def test_shards_without_a_commit_record_are_not_a_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path), keep=3)
    save(store, 7)
    (tmp_path / "step-000000007" / "commit.json").unlink()  # the writer died between its shards and the record
    assert store.latest() is None


def test_an_earlier_trainers_single_file_checkpoint_is_refused_with_what_to_do(tmp_path: Path) -> None:
    old = tmp_path / "step-000000012"
    old.mkdir()
    (old / "state.pt").write_bytes(b"whole state")
    (old / "COMPLETE").write_text("{}")
    store = CheckpointStore(str(tmp_path), keep=3)
    assert store.latest() == 12
    with pytest.raises(ConfigError, match=r"single-file checkpoint.*fresh directory"):
        store.require_sharded(12)


def test_what_a_dead_writer_left_at_the_same_step_is_replaced(tmp_path: Path) -> None:
    stale = tmp_path / "step-000000009"
    stale.mkdir()
    (stale / "__3_0.distcp").write_bytes(b"a shard of a 4-process writer that died")
    store = CheckpointStore(str(tmp_path), keep=3)
    save(store, 9)
    assert store.latest() == 9
    assert not (stale / "__3_0.distcp").exists()


def test_a_progress_mark_says_what_a_resume_from_an_older_checkpoint_loses(tmp_path: Path) -> None:
    from trainer.checkpoint import ProgressMark

    store = CheckpointStore(str(tmp_path / "ckpt"), keep=2)
    assert store.progress() is None  # none written yet
    store.mark_progress(ProgressMark(step=130, since_step=100, seconds=60.0))
    mark = store.progress()
    assert mark == ProgressMark(130, 100, 60.0)
    assert mark.lost_resuming_at(100) == (30, 60.0)  # resumed from the checkpoint it counted from
    assert mark.lost_resuming_at(80) == (50, 100.0)  # an older one: its seconds in proportion
    assert mark.lost_resuming_at(130) == mark.lost_resuming_at(140) == (0, 0.0)  # a checkpoint at or past it


@pytest.mark.parametrize("text", ["not json", '{"step": 3}', '{"step": -1, "since_step": 0, "seconds": 1}', "[]"])
def test_a_progress_mark_that_cannot_be_read_is_no_mark(tmp_path: Path, text: str) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "progress.json").write_text(text)
    assert CheckpointStore(str(root), keep=2).progress() is None


def test_commit_records_written_before_work_lost_was_kept_still_resume() -> None:
    from tests.checkpoint_contract import record
    from trainer.checkpoint import CommitRecord

    older = record(40).to_dict()
    del older["work_lost_steps"], older["work_lost_seconds"]
    assert CommitRecord.from_dict(older, "commit.json").work_lost_steps == 0
    del older["epochs"]
    with pytest.raises(ValueError, match="lacks \\['epochs'\\]"):
        CommitRecord.from_dict(older, "commit.json")


@pytest.mark.parametrize(
    ("format_", "task", "reordered"),
    [(3, "causal-lm", False), (2, "causal-lm", True), (2, "tabular-classification", False)],
)
def test_a_format_2_causal_lm_record_reorders_its_qkv_rows_head_major(format_: int, task: str, reordered: bool) -> None:
    """The earlier trainer's causal-lm checkpoints hold qkv rows query-key-value-major: their record is read, and
    says how to reorder them (every other tensor is left as it is)."""
    from tests.checkpoint_contract import record
    from trainer.checkpoint import CommitRecord

    data = {**record(40).to_dict(), "format": format_, "config": {"task": task}}
    upgrade = CommitRecord.from_dict(data, "commit.json").upgrade(n_head=2)
    assert (upgrade is not None) == reordered
    if upgrade is not None:
        qkv, other = torch.arange(24.0).view(12, 2), torch.arange(6.0)
        # 2 heads of 2 rows: q0 q1 k0 k1 v0 v1 (2 rows each) -> head 0's q k v, then head 1's
        head_major = qkv[[0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]]
        assert torch.equal(upgrade("blocks.3.attn.qkv.weight", qkv), head_major)
        assert torch.equal(upgrade("blocks.3.attn.qkv.bias", qkv[:, 0]), head_major[:, 0])
        assert torch.equal(upgrade("blocks.3.attn.proj.bias", other), other)


def test_a_commit_record_of_an_unknown_format_is_refused() -> None:
    from tests.checkpoint_contract import record
    from trainer.checkpoint import CommitRecord

    with pytest.raises(ValueError, match=r"format 2 or 3 .* it has format 1"):
        CommitRecord.from_dict({**record(40).to_dict(), "format": 1}, "commit.json")
