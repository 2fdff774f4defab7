"""The pure parts of `landfall drop` (which files, in what order; when ingest has settled) and `landfall watch`
(progress from the trainer's log records; each change printed once)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from landfall.commands import drop, watch
from landfall.errors import CommandError
from schemas.dataset_record import DatasetRecord, parse_dataset_record
from schemas.run_record import RunError, RunState, StateChange, new_run

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)


def test_drop_uploads_every_file_but_the_marker_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    for name in ("b/2.csv", "a.csv", "_SUCCESS", "landfall.json"):
        (tmp_path / name).write_text("x")
    assert [n for _, n in drop.files_to_upload(tmp_path, "datasets/d/")] == [
        "datasets/d/a.csv",
        "datasets/d/b/2.csv",
        "datasets/d/landfall.json",
    ]
    with pytest.raises(CommandError, match="is not a folder"):
        drop.files_to_upload(tmp_path / "a.csv", "datasets/d/")


def _dataset(status: str, generation: str | int, run_id: str = "run-x") -> DatasetRecord:
    version = {
        "idempotency_key": f"gcs:b/d/:{generation}",
        "run_id": run_id,
        "kind": "marker",
        "generation": generation,
        "completed_by": "gs://b/d/_SUCCESS",
        "status": "PUBLISHED",
    }
    return parse_dataset_record(
        {
            "dataset_id": "ds-1",
            "bucket": "b",
            "prefix": "d/",
            "uri": "gs://b/d/",
            "route": "r",
            "status": status,
            "updated_at": "2026-11-22T12:00:00Z",
            "version": version,
        }
    )


@pytest.mark.parametrize(
    "doc, settled",
    [
        (None, False),
        (_dataset("REQUESTED", "5", "run-old"), False),  # an earlier version
        (_dataset("COLLECTING", "7"), False),
        (_dataset("REQUESTED", "7"), True),
        (_dataset("REFUSED", 7), True),  # a generation stored as a number reads as its text
    ],
)
def test_drop_waits_for_the_version_its_marker_completed(doc: DatasetRecord | None, settled: bool) -> None:
    assert drop.settled(doc, "7") is settled


def test_drop_gives_up_after_the_wait() -> None:
    clock = iter(range(100))
    assert drop.wait_for(lambda: None, "7", 3, sleep=lambda _: None, clock=lambda: float(next(clock))) is None


def _line(message: str, at: str = "2026-11-22T12:00:00.000000Z", **fields: object) -> str:
    return json.dumps({"severity": "INFO", "message": message, "time": at, "rank": 0, **fields})


def _at(second: int) -> str:
    return f"2026-11-22T12:{second // 60:02d}:{second % 60:02d}.000000Z"


def test_progress_labels_training_and_held_out_loss_with_the_planned_steps_and_an_eta() -> None:
    lines = [
        _line("training started", _at(0), total_steps=40, steps_per_epoch=20),
        _line("training", _at(10), step=10, total_steps=40, epoch=1, loss=0.91234),
        "not json",
        _line("training", _at(20), step=20, total_steps=40, epoch=1, loss=0.6),
        _line("epoch finished", _at(21), step=20, epoch=1, loss=0.5, accuracy=0.8, evaluated_on="held-out"),
    ]
    # 20 steps in the 21 s since training started: the 20 steps left take 21 s
    assert watch.progress_line(lines) == (
        "epoch 1  step 20/40 (50%)  train loss 0.6  held-out loss 0.5 (epoch 1)  ETA 21s"
    )
    assert watch.progress_line(lines[:2]) == "epoch 1  step 10/40 (25%)  train loss 0.9123  ETA 30s"
    assert watch.progress_line(lines[1:2]) == "epoch 1  step 10/40 (25%)  train loss 0.9123"  # no pace yet
    no_held_out = _line("epoch finished", _at(21), step=20, epoch=1, loss=0.7, evaluated_on="training")
    assert "training loss 0.7 (epoch 1)" in (watch.progress_line([*lines[:4], no_held_out]) or "")


def test_progress_says_what_the_trainer_does_when_it_is_not_stepping() -> None:
    reading = _line("reading the dataset", _at(5), data_uri="gs://b/d/", files=3)
    said = "trainer: reading the dataset (since 12:00:05 UTC)  data_uri=gs://b/d/  files=3"
    assert watch.progress_line([reading]) == said
    stepped = [_line("training", _at(10), step=10, total_steps=40, epoch=1, loss=0.9)]
    saving = _line("checkpoint saved", _at(70), step=10, uri="gs://b/ck/10/")
    assert watch.progress_line([reading, *stepped, saving]) == (
        "epoch 1  step 10/40 (25%)  train loss 0.9\n"
        "trainer: checkpoint saved (since 12:01:10 UTC)  step=10  uri=gs://b/ck/10/"
    )
    assert watch.progress_line(["a traceback line", "not json"]) is None


def test_eta_restarts_its_pace_after_a_resume() -> None:
    lines = [
        _line("training", _at(0), step=1, total_steps=100, epoch=1, loss=1.0),
        _line("training", _at(1), step=50, total_steps=100, epoch=1, loss=1.0),
        _line("resumed from checkpoint", _at(100), step=50),
        _line("training", _at(110), step=60, total_steps=100, epoch=1, loss=1.0),
        _line("training", _at(120), step=70, total_steps=100, epoch=1, loss=1.0),
    ]
    assert watch.progress_line(lines) == "epoch 1  step 70/100 (70%)  train loss 1  ETA 30s"


def test_watch_prints_each_change_once_and_stops_at_the_end() -> None:
    run = new_run("run-1", {}, now=NOW)
    running = replace(run, state=RunState.RUNNING, history=(*run.history, StateChange(RunState.RUNNING, "t1", "job")))
    failed = replace(
        running,
        state=RunState.FAILED,
        error=RunError("job-failed", "out of memory"),
        history=(*running.history, StateChange(RunState.FAILED, "t2", "")),
    )
    reads = iter([run, running, running, failed])
    progress = iter([None, "step 1/4", "step 1/4", "step 4/4"])
    out = io.StringIO()
    end = watch.watch(lambda: next(reads), lambda _run: next(progress), out, sleep=lambda _: None)
    assert end is failed
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines if not line.startswith(" ")] == ["RECEIVED", "RUNNING", "FAILED"]
    assert [line.strip() for line in lines if line.startswith(" ")] == ["step 1/4"]  # once; none after the end
    assert watch.summary(end) == "run run-1 ended FAILED: out of memory (job-failed)"


def test_watch_prints_the_step_line_once_while_what_the_trainer_does_changes() -> None:
    run = new_run("run-1", {}, now=NOW)
    ended = replace(run, state=RunState.SUCCEEDED, history=(*run.history, StateChange(RunState.SUCCEEDED, "t", "")))
    reads = iter([run, run, run, ended])
    progress = iter(["step 4/4", "step 4/4\ntrainer: training finished", "step 4/4\ntrainer: model written", None])
    out = io.StringIO()
    watch.watch(lambda: next(reads), lambda _run: next(progress), out, sleep=lambda _: None)
    assert [line.strip() for line in out.getvalue().splitlines() if line.startswith(" ")] == [
        "step 4/4",
        "trainer: training finished",
        "trainer: model written",
    ]
