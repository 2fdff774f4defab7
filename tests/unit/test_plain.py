"""schemas/plain.py: `plain` returns what dataclasses.asdict returns, without sharing a container with its input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.plain import as_dict, plain
from schemas.run_record import parse_run_record
from schemas.training_request import parse_training_request

EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"


@dataclasses.dataclass(frozen=True)
class Leaf:
    text: str = ""
    number: float = 0.0
    flag: bool | None = None


@dataclasses.dataclass(frozen=True)
class Node:
    leaves: tuple[Leaf, ...] = ()
    items: list[Any] = dataclasses.field(default_factory=list)
    table: dict[str, Any] = dataclasses.field(default_factory=dict)
    child: Leaf | None = None


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
leaves = st.builds(Leaf, st.text(max_size=5), st.floats(allow_nan=False), st.none() | st.booleans())
values = st.recursive(
    scalars | leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)
nodes = st.builds(
    Node,
    st.lists(leaves, max_size=3).map(tuple),
    st.lists(values, max_size=3),
    st.dictionaries(st.text(max_size=3), values, max_size=3),
    st.none() | leaves,
)


def containers(value: Any) -> list[int]:
    """The ids of every list and dict inside value."""
    found: list[int] = []
    if isinstance(value, list | dict):
        found.append(id(value))
    for inner in value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ():
        found += containers(inner)
    return found


@given(nodes)
def test_plain_is_asdict(node: Node) -> None:
    mine = plain(node)
    assert mine == dataclasses.asdict(node)
    assert repr(mine) == repr(dataclasses.asdict(node))  # the same types too (tuples stay tuples)
    assert not set(containers(mine)) & set(containers(dataclasses.asdict(node)) + containers(node.items))
    mine["items"].append("x")  # a new list: the record is untouched
    assert "x" not in node.items


def test_plain_on_the_records_landfall_writes() -> None:
    request = parse_training_request(json.loads((EXAMPLES / "training_request.json").read_text()))
    run = parse_run_record(json.loads((EXAMPLES / "run_record.json").read_text()))
    assert run.plan is not None
    for record in (request, run, run.submission, run.plan):
        assert repr(as_dict(record)) == repr(dataclasses.asdict(record))


def test_as_dict_takes_only_a_record() -> None:
    with pytest.raises(TypeError, match="dataclass instances, not list"):
        as_dict([1])
    with pytest.raises(TypeError, match="dataclass instances, not type"):
        as_dict(Leaf)
