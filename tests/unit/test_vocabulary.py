"""Each closed vocabulary (tasks, strategies, precisions, Spot policies, failure reasons) lives once, in
schemas/vocabulary.py.

The guard at the end scans the shipped packages for literal collections that spell out two or more values of a
vocabulary: such a collection is a second copy of the list, bound to drift. The few per-value tables that are facts
of their own (keyed by the names, failing loudly when a name is missing) are listed with the reason they stay.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from schemas import vocabulary
from schemas.model_presets import load_presets

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("functions", "trainer", "schemas", "deploy", "landfall")  # what ships; tests and benches pick values
VOCABULARIES = {
    "TASKS": vocabulary.TASKS,
    "STRATEGIES": vocabulary.STRATEGIES,
    "PRECISIONS": vocabulary.PRECISIONS,
    "SPOT_POLICIES": vocabulary.SPOT_POLICIES,
    "FAILURE_REASONS": vocabulary.FAILURE_REASONS,
    "TRAINER_FAILURE_KINDS": vocabulary.TRAINER_FAILURE_KINDS,
}
# (file, vocabulary) -> why a literal there may name several values.
KEPT = {
    ("functions/planning/memory.py", "STRATEGIES"): "bytes per parameter per strategy (ZeRO paper), keyed by name",
    ("trainer/precision.py", "PRECISIONS"): "the torch dtype of each 16-bit precision",
    ("functions/planning/search.py", "FAILURE_REASONS"): "the planner's rejection reasons (quota, timeout: both)",
    ("functions/planning/feasibility.py", "FAILURE_REASONS"): "labels of the planner's rejection reasons (search.py)",
}


@pytest.mark.parametrize(
    "terms",
    [
        vocabulary.TASK_TERMS,
        vocabulary.STRATEGY_TERMS,
        vocabulary.PRECISION_TERMS,
        vocabulary.SPOT_TERMS,
        vocabulary.FAILURE_REASON_TERMS,
        vocabulary.TRAINER_FAILURE_KIND_TERMS,
    ],
)
def test_every_value_is_unique_and_explained(terms: tuple[vocabulary.Term, ...]) -> None:
    assert len(vocabulary.names(terms)) == len(set(vocabulary.names(terms)))
    assert all(term.doc.strip() and term.label for term in terms)


def test_derived_forms_follow_the_one_tuple() -> None:
    assert [vocabulary.STRATEGY_INDEX[s] for s in vocabulary.STRATEGIES] == list(range(len(vocabulary.STRATEGIES)))
    assert list(vocabulary.STRATEGY_TITLES) == list(vocabulary.STRATEGIES)
    assert vocabulary.FP32 in vocabulary.PRECISIONS and vocabulary.FP32 in vocabulary.PRECISION_POLICIES
    assert set(vocabulary.FSDP_STRATEGIES) < set(vocabulary.STRATEGIES)
    assert vocabulary.REQUESTED_PRECISIONS[1:] == vocabulary.PRECISIONS


def test_every_task_has_presets_of_its_family() -> None:
    families = {preset.family for preset in load_presets().values()}
    assert set(vocabulary.TASK_MODEL_FAMILY.values()) <= families
    assert set(vocabulary.TASK_MODEL_FAMILY) == set(vocabulary.TASKS)


def test_the_planner_and_the_trainer_take_the_vocabulary() -> None:
    from functions.planning.memory import STATE_BYTES_PER_PARAM
    from trainer.config import build_parser

    assert len(STATE_BYTES_PER_PARAM) == len(vocabulary.STRATEGIES)
    choices = {a.dest: a.choices for a in build_parser()._actions}
    assert choices["task"] is vocabulary.TASKS
    assert choices["strategy"] is vocabulary.STRATEGIES
    assert choices["precision"] is vocabulary.REQUESTED_PRECISIONS


def _literal_values(node: ast.AST) -> list[str] | None:
    """The string constants of a literal tuple, list or set, or of a dict's keys; None for anything else."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        items = node.elts
    elif isinstance(node, ast.Dict):
        items = [k for k in node.keys if k is not None]
    else:
        return None
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def test_no_vocabulary_is_spelled_out_twice() -> None:
    found: dict[tuple[str, str], int] = {}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if not isinstance(node, ast.expr):
                    continue  # literals are expressions
                values = _literal_values(node)
                for name, vocab in VOCABULARIES.items():
                    if values is not None and len(set(values) & set(vocab)) >= 2:
                        found[(rel, name)] = node.lineno
    copies = {f"{rel}:{line} spells out {name}" for (rel, name), line in found.items() if (rel, name) not in KEPT}
    assert not copies, "import the tuple from schemas/vocabulary.py instead:\n" + "\n".join(sorted(copies))
    stale = set(KEPT) - set(found)
    assert not stale, f"listed as kept but no longer found (drop them from KEPT): {sorted(stale)}"
