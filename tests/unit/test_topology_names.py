"""What deploy/topology.toml names (functions, topics, subscriptions) is written there once: the CLI, the local
stack, the deployer and the benches look each name up (deploy/topology.py) instead of spelling it again, so a
function or topic added to the file needs no second list. The guard scans their string constants."""

from __future__ import annotations

import ast
from pathlib import Path

from deploy.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("landfall", "deploy", "bench", "scripts")
"""functions/main.py is not scanned: it defines the entry points the topology names (a test ties the two)."""


def topology_names() -> set[str]:
    topology = load_topology()
    names = {topology.dead_letter_subscription, *topology.topics}
    for route in topology.functions:
        names |= {route.name, route.topic, route.subscription, route.dead_letter.topic}
    return names | {schedule.topic for schedule in topology.schedules}


def test_no_topology_name_is_spelled_outside_the_topology() -> None:
    names = topology_names()
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                    found.append(f"{rel}:{node.lineno} spells {node.value!r}")
    assert not found, "look the name up in deploy/topology.py (load_topology()) instead:\n" + "\n".join(found)


def test_each_topic_that_feeds_a_function_finds_it() -> None:
    topology = load_topology()
    assert [topology.fed_by(route.topic) for route in topology.functions] == list(topology.functions)


def test_every_topology_function_is_an_entry_point_that_logs_under_its_name() -> None:
    """functions/main.py: each [functions.NAME] is a decorated entry point NAME whose log lines say `NAME:` (the
    dead-letter report and the load bench find a function's lines by it)."""
    tree = ast.parse((ROOT / "functions" / "main.py").read_text())
    logged = {
        node.name: [
            call.args[0].value
            for call in ast.walk(node)
            if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "_run"
            and isinstance(call.args[0], ast.Constant)
        ]
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.decorator_list
    }
    for route in load_topology().functions:
        assert logged.get(route.name) == [route.name], f"functions/main.py: no entry point {route.name} logging so"
