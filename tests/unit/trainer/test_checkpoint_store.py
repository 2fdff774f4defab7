"""Checkpoint store: a checkpoint without its commit record is never loaded; the newest committed one wins; k are
kept; an earlier trainer's single-file checkpoint is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

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
