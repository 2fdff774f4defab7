"""Fault points (functions/fault_points.py): inert when off, firing as configured, one table of names that every
handler's calls come from."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from functions import fault_points
from functions.fault_points import FAULT_POINTS, Fault, InjectedFault, fault_point, parse

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"


@pytest.fixture(autouse=True)
def _restore() -> object:
    saved = dict(fault_points._ACTIVE)
    yield
    fault_points.configure(saved)


def test_off_by_default_every_point_is_inert() -> None:
    fault_points.configure(fault_points.from_env({}))
    for name in FAULT_POINTS:
        fault_point(name)  # nothing happens


def test_a_raise_point_fires_only_where_configured() -> None:
    fault_points.configure(parse("dispatch.after_claim=raise@1"))
    fault_point("dispatch.after_plan")
    with pytest.raises(InjectedFault, match=r"dispatch\.after_claim"):
        fault_point("dispatch.after_claim")


def test_probability_zero_never_fires() -> None:
    fault_points.configure(parse("listener.after_record=raise@0"))
    for _ in range(100):
        fault_point("listener.after_record")


def test_a_crash_point_exits_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(fault_points.os, "_exit", fake_exit)
    fault_points.configure(parse("ingest.after_publish=crash"))
    with pytest.raises(SystemExit):
        fault_point("ingest.after_publish")
    assert exits == [fault_points.CRASH_EXIT_CODE]


def test_the_environment_variable_is_parsed() -> None:
    assert fault_points.from_env({fault_points.ENV: "ingest.after_read=crash@0.25, reconciler.after_run=raise"}) == {
        "ingest.after_read": Fault("crash", 0.25),
        "reconciler.after_run": Fault("raise", 1.0),
    }


@pytest.mark.parametrize(
    "spec, problem",
    [
        ("dispatch.after_clam=crash@1", "unknown fault point"),
        ("dispatch.after_claim=explode@1", "MODE one of crash, raise"),
        ("dispatch.after_claim=crash@1.5", "probability between 0 and 1"),
        ("dispatch.after_claim=crash@often", "probability between 0 and 1"),
    ],
)
def test_bad_settings_are_refused_with_the_reason(spec: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse(spec)


def _points_called_in_functions() -> set[str]:
    names: set[str] = set()
    for path in FUNCTIONS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "fault_point"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names.add(str(node.args[0].value))
    return names


def test_the_table_lists_exactly_the_points_the_functions_call() -> None:
    assert _points_called_in_functions() == set(FAULT_POINTS)


def test_every_function_has_fault_points() -> None:
    prefixes = {name.split(".")[0] for name in FAULT_POINTS}
    assert prefixes == {"ingest", "dispatch", "listener", "reconciler"}
