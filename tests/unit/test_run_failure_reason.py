"""The reason is on the run: the trainer's failure record (schemas/trainer_failure.py) becomes the run's
error, beside Vertex's message. The listener runs against the fakes."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from schemas.errors import SchemaError
from schemas.run_record import RunError, parse_run_record
from schemas.trainer_failure import FAILURE_FILE, TrainerFailure, parse_trainer_failure
from tests.fakes.world import NOW, World

STARTED = NOW + timedelta(minutes=2)
ENDED = STARTED + timedelta(minutes=5)
VERTEX_SAYS = "The replica workerpool0-0 exited with a non-zero status of 3. Termination reason: Error."
NO_LABEL = "gs://landfall-landing/datasets/a/ : no label column 'label'; columns are ['hyperparameters']"


def failed_run(failure_json: str | None) -> World:
    """A submitted run whose job then fails with exit status 3, leaving failure_json (or nothing)."""
    w = World()
    assert w.deliver() == "submitted"
    (name,) = w.vertex.jobs
    artifacts = w.run().artifacts
    assert artifacts is not None
    if failure_json is not None:
        w.objects[f"{artifacts.model_dir}{FAILURE_FILE}"] = failure_json
    w.vertex.set_state(name, "JOB_STATE_FAILED", start=STARTED, end=ENDED, error=(3, VERTEX_SAYS))
    assert w.job_event(name.rsplit("/", 1)[-1]) == "recorded:FAILED"
    return w


def test_the_trainers_reason_is_the_runs_error_and_vertex_message_is_kept() -> None:
    record = TrainerFailure(kind="DataError", message=NO_LABEL, exit_code=3, step=0, rank=0)
    w = failed_run(record.to_json())
    error = w.run().error
    assert error == RunError(
        "job-failed",
        NO_LABEL,
        kind="DataError",
        step=0,
        job_message=VERTEX_SAYS,
        reason="bad-data",
        replica="workerpool0-0",
        exit_code=3,
    )
    assert w.doc()["error"] == {
        "code": "job-failed",
        "message": NO_LABEL,
        "kind": "DataError",
        "step": 0,
        "job_message": VERTEX_SAYS,
        "reason": "bad-data",
        "replica": "workerpool0-0",
        "exit_code": 3,
    }
    assert w.run().history[-1].detail == VERTEX_SAYS


def test_without_a_failure_record_the_error_is_vertexs_message() -> None:
    w = failed_run(None)
    assert w.doc()["error"] == {
        "code": "job-failed",
        "message": VERTEX_SAYS,
        "reason": "user-code",
        "replica": "workerpool0-0",
        "exit_code": 3,
    }


def test_an_unreadable_failure_record_is_named_and_vertexs_message_kept() -> None:
    error = failed_run("{not json").run().error
    assert error is not None and error.kind is None and error.message.startswith(VERTEX_SAYS)
    assert f"model/{FAILURE_FILE} is unreadable" in error.message


def test_a_failure_record_round_trips_and_a_bad_one_names_the_field() -> None:
    record = TrainerFailure(kind="OutOfMemory", message="out of memory on cuda:0 at step 12", exit_code=4, step=12)
    assert parse_trainer_failure(record.to_json()) == record
    assert "rank" not in record.to_dict()
    with pytest.raises(SchemaError, match=r"failure\.exit_code"):
        parse_trainer_failure(json.dumps({"kind": "DataError", "message": "m", "exit_code": "3"}))


def test_run_records_written_before_the_new_fields_read_the_same() -> None:
    stored = {"code": "job-failed", "message": VERTEX_SAYS}
    golden: dict[str, Any] = json.loads((Path(__file__).parents[2] / "schemas/examples/run_record.json").read_text())
    doc = copy.deepcopy(golden) | {"state": "FAILED", "error": stored}
    run = parse_run_record(doc)
    assert run.error == RunError("job-failed", VERTEX_SAYS) and run.to_dict() == doc


def test_the_golden_failure_record_round_trips() -> None:
    text = (Path(__file__).parents[2] / "schemas/examples/trainer_failure.json").read_text()
    assert parse_trainer_failure(text).to_dict() == json.loads(text)
