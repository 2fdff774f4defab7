"""functions/main.py WARM_IMPORTS: what an entry point's first message would import is imported when its instance
starts (FUNCTION_TARGET), for every function a schedule does not tick, and stays true as the entry points change."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from deploy.topology import load_topology
from functions import main
from functions.settings import function_target

SOURCE = Path(main.__file__)


def body_imports(entry: str) -> set[str]:
    """The modules the entry point's body imports on its first call."""
    tree = ast.parse(SOURCE.read_text())
    (func,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry]
    return {n.module for n in ast.walk(func) if isinstance(n, ast.ImportFrom) and n.module}


def test_every_function_a_message_starts_is_warmed_and_a_scheduled_one_is_not() -> None:
    topology = load_topology()
    ticked = {s.topic for s in topology.schedules}
    assert set(main.WARM_IMPORTS) == {f.name for f in topology.functions if f.topic not in ticked}


@pytest.mark.parametrize("entry", sorted(main.WARM_IMPORTS))
def test_a_warmed_entry_point_imports_at_start_what_its_body_imports(entry: str) -> None:
    missing = body_imports(entry) - set(main.WARM_IMPORTS[entry])
    assert not missing, f"{entry}: add {sorted(missing)} to WARM_IMPORTS (its first message imports them)"
    for module in main.WARM_IMPORTS[entry]:
        assert importlib.util.find_spec(module) is not None, f"{entry}: {module} is not installed"


def test_the_target_is_read_from_function_target() -> None:
    assert function_target({"FUNCTION_TARGET": "dispatch"}) == "dispatch"
    assert function_target({}) == ""
