"""The order `make test`'s two workers take their units in (tests/conftest.py): the shared stack's unit first, the
module with stacks of its own next, then the integration modules, and the unit tests last, to fill the end."""

from __future__ import annotations

from tests.conftest import OWN_STACK, STACK_GROUP, unit_order, work_unit


def test_units_are_handed_out_stack_first_and_unit_tests_last() -> None:
    nodeids = [
        "tests/unit/test_a.py::test_one",
        "tests/integration/test_b.py::test_two",
        "tests/integration/test_b.py::test_three",
        "tests/integration/test_c.py::test_long",
        f"{OWN_STACK}::test_down_up",
        "tests/e2e/test_chain.py::test_chain",
        "tests/unit/test_deploy_cli.py::test_staged",
    ]
    units: dict[str, int] = {}
    for nodeid in nodeids:
        unit = work_unit(nodeid)
        units[unit] = units.get(unit, 0) + 1
    assert sorted(units, key=lambda unit: unit_order(unit, units[unit])) == [
        STACK_GROUP,
        OWN_STACK,
        "tests/integration/test_b.py",
        "tests/integration/test_c.py",
        "deploy-stage",
        "tests/unit/test_a.py::test_one",
    ]
