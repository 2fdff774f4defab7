"""The run record contract (schemas/run_record.py): one constructor, one parser, and a stored shape that round-trips
(golden example schemas/examples/run_record.json)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from schemas.errors import SchemaError
from schemas.plan import parse_plan
from schemas.run_record import TIME_FIELDS, RunError, RunState, Submission, new_run, parse_run_record

EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
GOLDEN = json.loads((EXAMPLES / "run_record.json").read_text())
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def test_the_golden_record_round_trips_exactly() -> None:
    run = parse_run_record(copy.deepcopy(GOLDEN))
    assert run.to_dict() == GOLDEN
    assert run.state == RunState.SUCCEEDED and run.plan is not None and run.plan.region == "europe-west4"
    assert [a.outcome.split(":")[0] for a in run.submission.attempts or ()] == ["capacity", "created"]
    assert run.timings.run_seconds == 45.25 and run.cost.actual_usd == 0.000581


def test_a_plan_stored_again_in_the_same_document_is_read_once_and_shared() -> None:
    """Each attempt stores a copy of the plan it tried: a copy equal to the run's plan or a fallback gets the Plan
    already read (the same frozen object); a plan stored once is read on its own, as parse_plan reads it."""
    doc = copy.deepcopy(GOLDEN)
    refused_doc, created_doc = doc["submission"]["attempts"]
    run = parse_run_record(doc)
    refused, created = run.submission.attempts or ()
    fallback = (run.submission.fallbacks or ())[0]
    assert created_doc["plan"] == doc["plan"] == doc["submission"]["fallbacks"][0]
    assert created.plan is run.plan and fallback is run.plan
    assert refused_doc["plan"] != doc["plan"] and refused.plan is not run.plan
    assert refused.plan == parse_plan(copy.deepcopy(refused_doc["plan"])) and refused.plan.region == "us-central1"


def _times(doc: Any, path: list[str]) -> list[Any]:
    """The values at one TIME_FIELDS path ("[]" is every entry of a list)."""
    if not path:
        return [doc]
    head, rest = path[0], path[1:]
    if head.endswith("[]"):
        return [v for item in doc.get(head[:-2]) or [] for v in _times(item, rest)]
    return _times(doc[head], rest) if doc.get(head) is not None else []


def test_the_stored_document_holds_every_time_as_a_timestamp_and_reads_back() -> None:
    run = parse_run_record(copy.deepcopy(GOLDEN))
    stored = run.to_document()
    found = {name: _times(stored, name.split(".")) for name in TIME_FIELDS}
    assert all(found.values()), f"the golden example lacks a time at {[n for n, v in found.items() if not v]}"
    assert all(isinstance(v, datetime) and v.tzinfo is not None for values in found.values() for v in values)
    assert stored["created_at"] == datetime.fromisoformat(GOLDEN["created_at"])
    assert parse_run_record(stored) == run and parse_run_record(stored).to_document() == stored
    timed = ("created_at", "updated_at", "history", "timings", "submission", "model")
    assert {k: v for k, v in stored.items() if k not in timed} == {k: v for k, v in GOLDEN.items() if k not in timed}


def test_older_documents_with_rfc3339_text_still_read() -> None:
    older = copy.deepcopy(GOLDEN)
    older["timings"]["started_at"] = "2026-11-22T13:00:00.123456789+01:00"  # as Vertex wrote it before
    run = parse_run_record(older)
    assert run.created_at == GOLDEN["created_at"]
    assert run.to_document()["timings"]["started_at"] == datetime(2026, 11, 22, 12, 0, 0, 123456, tzinfo=UTC)


def test_a_time_of_the_wrong_type_is_named() -> None:
    with pytest.raises(SchemaError, match=r"run\.history\[0\]\.at"):
        parse_run_record({**copy.deepcopy(GOLDEN), "history": [{"state": "RECEIVED", "at": 12, "detail": ""}]})
    with pytest.raises(SchemaError, match=r"run\.history"):
        parse_run_record({**copy.deepcopy(GOLDEN), "history": "yesterday"})


def test_a_new_run_is_stored_in_the_shape_the_cli_and_users_read() -> None:
    stamp = "2026-11-22T12:00:00.000000Z"
    assert new_run("run-1", {"task": "x"}, now=NOW).to_dict() == {
        "schema_version": 1,
        "run_id": "run-1",
        "state": "RECEIVED",
        "request": {"task": "x"},
        "created_at": stamp,
        "updated_at": stamp,
        "history": [{"state": "RECEIVED", "at": stamp, "detail": ""}],
        "plan": None,
        "vertex": None,
        "artifacts": None,
        "metrics": None,
        "error": None,
        "timings": {"created_at": stamp},
        "cost": {},
        "submission": {},
    }
    rejected = new_run(
        "run-2", {}, now=NOW, state=RunState.REJECTED, detail="bad", error=RunError("invalid-request", "bad")
    ).to_dict()
    assert rejected["history"] == [{"state": "REJECTED", "at": stamp, "detail": "bad"}]
    assert rejected["error"] == {"code": "invalid-request", "message": "bad"}


def test_absent_optional_parts_stay_absent() -> None:
    doc = new_run("run-1", {}, now=NOW).to_dict()
    del doc["timings"], doc["cost"], doc["submission"], doc["schema_version"]
    run = parse_run_record(doc)
    assert run.submission == Submission() and run.to_dict()["submission"] == {} and run.to_dict()["cost"] == {}
    planned = parse_run_record({**doc, "submission": {"fallbacks": [], "attempts": []}})
    assert planned.to_dict()["submission"] == {"fallbacks": [], "attempts": []}


def _broken(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(GOLDEN)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("state",), "DONE", "run.state"),
        (("history", 1, "state"), "LATER", "run.history[1].state"),
        (("history",), {"state": "RECEIVED"}, "run.history"),
        (("submission", "attempts", 0, "region"), 5, "run.submission.attempts[0].region"),
        (("submission", "fallbacks", 0, "strategy"), "tp", "plan.strategy"),
        (("plan", "replica_count"), 0, "plan.replica_count"),
        (("timings", "run_seconds"), "45", "run.timings.run_seconds"),
        (("cost", "actual_usd"), "free", "run.cost.actual_usd"),
        (("metrics",), [1, 2], "run.metrics"),
        (("vertex", "job_id"), None, "run.vertex.job_id"),
        (("error",), {"code": "x"}, "run.error.message"),
    ],
)
def test_a_document_that_does_not_fit_names_the_field(path: tuple[Any, ...], value: Any, field: str) -> None:
    with pytest.raises(SchemaError) as caught:
        parse_run_record(_broken(path, value))
    assert caught.value.field == field


def test_the_cli_describes_a_run_from_its_typed_record() -> None:
    from landfall.commands.runs import describe

    text = describe(parse_run_record(copy.deepcopy(GOLDEN)))
    assert "plan      1 x e2-standard-4 (cpu) in europe-west4, ddp, spot, est. $0.00443" in text
    assert "cost      estimated $0.00443, actual $0.000581" in text
    assert "run_seconds 45.25" in text and "metrics   loss 0.081, accuracy 0.975" in text
    assert "history   RECEIVED -> PLANNED -> SUBMITTING -> SUBMITTED -> RUNNING -> SUCCEEDED\n" in text
    assert "timeline:\nSTATE" in text
    rejected = describe(
        new_run(
            "run-2",
            {"task": 5},
            now=NOW,
            state=RunState.REJECTED,
            error=RunError("invalid-request", "task: expected a string"),
        )
    )
    assert "error     invalid-request: task: expected a string" in rejected and "plan " not in rejected
