"""The deploy page's "Cost at rest" counts what the topology schedules (docs/deploy.md, "From nothing to a
deployment"): the figures are derived here from [schedules.*], so a schedule added or slowed down makes this fail
until the text says so."""

from __future__ import annotations

import re
from pathlib import Path

from deploy.topology import load_topology

DEPLOY_PAGE = Path(__file__).parents[2] / "docs" / "deploy.md"
NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
MONTH_SECONDS = 30 * 86_400


def cost_at_rest() -> str:
    text = DEPLOY_PAGE.read_text()
    found = re.search(r"\*\*Cost at rest\*\*(.*?)\n\n", text, re.DOTALL)
    assert found, "docs/deploy.md has no **Cost at rest** paragraph"
    return " ".join(found.group(1).split())


def test_cost_at_rest_counts_every_schedule_and_its_calls() -> None:
    schedules = load_topology().schedules
    paragraph = cost_at_rest()
    assert f"the {NUMBERS[len(schedules)]} schedules" in paragraph, paragraph
    calls = sum(MONTH_SECONDS // schedule.every_seconds for schedule in schedules)
    assert f"about {calls:,} short function calls a month" in paragraph, paragraph
