"""Teams (deploy/teams.py, functions/records/team_ledger.py): the file's format and its errors, who owns which data,
and each team's use against its limits (the one function `landfall teams` and the dashboard call)."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deploy.teams import Teams, TeamsError, parse_teams, read_teams
from functions.records import team_ledger as rules
from functions.records.team_ledger import Verdict
from schemas.team_ledger import RunCharge, TeamLedger, parse_run_charge, parse_team_ledger

NOW = datetime(2026, 11, 27, 2, 0, tzinfo=UTC)

TEAMS_TOML = """
schema_version = 1
unowned = "allow"

[[teams]]
name = "vision"
owns = [{bucket = "*", prefix = "datasets/vision/"}, {bucket = "vision-raw", prefix = ""}]
priority = 10
monthly_budget_usd = 100.0
max_run_usd = 40.0
requests_topic = "landfall-requests-vision"

[teams.gpu_cap]
all = 8
NVIDIA_TESLA_T4 = 4

[[teams]]
name = "speech"
owns = [{prefix = "datasets/"}]
monthly_budget_usd = 50
"""


def _teams(text: str = TEAMS_TOML) -> Teams:
    return parse_teams(tomllib.loads(text), source="teams.toml")


def test_the_shipped_file_holds_no_teams_so_every_run_is_allowed() -> None:
    teams = read_teams()
    assert not teams and teams.unowned == "allow"
    assert teams.owner_of("any-bucket", "datasets/x/") is None


def test_a_file_is_read_with_its_teams_limits_and_owners(tmp_path: Path) -> None:
    path = tmp_path / "teams.toml"
    path.write_text(TEAMS_TOML)
    teams = read_teams(str(path))
    vision, speech = teams.teams
    assert (vision.name, vision.priority, vision.run_limit_usd, vision.requests_topic) == (
        "vision",
        10,
        40.0,
        "landfall-requests-vision",
    )
    assert dict(vision.gpu_cap) == {"all": 8, "NVIDIA_TESLA_T4": 4}
    assert speech.run_limit_usd == 50.0 and speech.priority == 0 and not speech.gpu_cap
    # The longest owned prefix decides: datasets/vision/ is vision's although speech owns all of datasets/.
    assert teams.owner_of("landing", "datasets/vision/cats/") is vision
    assert teams.owner_of("landing", "datasets/words/") is speech
    assert teams.owner_of("vision-raw", "anything/") is vision
    assert teams.owner_of("landing", "exports/x/") is None
    assert teams.by_topic("projects/p/topics/landfall-requests-vision") is vision
    assert teams.by_topic("landfall-training-requests") is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("schema_version = 2\n", "schema_version 2 is not 1"),
        ('unowned = "maybe"\n', "unowned 'maybe' must be one of allow, reject"),
        ('[[teams]]\nname = "Vision"\nowns = [{prefix = "a/"}]\nmonthly_budget_usd = 1\n', "lower-case letters"),
        ('[[teams]]\nname = "v"\nmonthly_budget_usd = 1\n', "owns must list the data it owns"),
        ('[[teams]]\nname = "v"\nowns = [{prefix = "a"}]\nmonthly_budget_usd = 1\n', 'must be a folder ending in "/"'),
        ('[[teams]]\nname = "v"\nowns = [{prefix = "a/"}]\n', "monthly_budget_usd is required"),
        ('[[teams]]\nname = "v"\nowns = [{prefix = "a/"}]\nmonthly_budget_usd = -1\n', "must be a number of dollars"),
        (
            '[[teams]]\nname = "v"\nowns = [{prefix = "a/"}]\nmonthly_budget_usd = 1\n[teams.gpu_cap]\nA100 = 2\n',
            "'A100' is not a GPU kind; use 'all' or a Vertex accelerator type: ",
        ),
        (
            '[[teams]]\nname = "v"\nowns = [{prefix = "a/"}]\nmonthly_budget_usd = 1\n[teams.gpu_cap]\nall = 1.5\n',
            "expected a whole number of GPUs",
        ),
        ('[[teams]]\nname = "v"\nowns = [{prefix = "a/"}]\nmonthly_budget_usd = 1\ncolour = "red"\n', "unknown keys"),
        (
            '[[teams]]\nname = "v"\nowns = [{prefix = "a/"}]\nmonthly_budget_usd = 1\nmax_run_usd = 2\n',
            "max_run_usd 2.0 is above monthly_budget_usd 1.0",
        ),
        (
            '[[teams]]\nname = "a"\nowns = [{prefix = "x/"}]\nmonthly_budget_usd = 1\n'
            '[[teams]]\nname = "b"\nowns = [{prefix = "x/"}]\nmonthly_budget_usd = 1\n',
            "gs://*/x/ is owned by both 'a' and 'b'",
        ),
        (
            '[[teams]]\nname = "a"\nowns = [{prefix = "x/"}]\nmonthly_budget_usd = 1\n'
            '[[teams]]\nname = "a"\nowns = [{prefix = "y/"}]\nmonthly_budget_usd = 1\n',
            "team names must be unique",
        ),
    ],
)
def test_a_bad_file_says_what_was_expected(text: str, said: str) -> None:
    with pytest.raises(TeamsError) as err:
        _teams(text)
    assert said in str(err.value)


def test_a_missing_or_broken_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(TeamsError, match="does not exist; set LANDFALL_TEAMS_FILE"):
        read_teams(str(tmp_path / "nope.toml"))
    broken = tmp_path / "broken.toml"
    broken.write_text("[[teams]\n")
    with pytest.raises(TeamsError, match="fix the TOML"):
        read_teams(str(broken))


def test_use_against_limits_reads_the_ledger_of_this_month() -> None:
    vision, speech = _teams().teams
    ledger = TeamLedger(team="vision")
    ledger, charge = rules.reserved(ledger, RunCharge("vision"), {"NVIDIA_TESLA_T4": 4}, 12.5, NOW)
    ledger, _ = rules.reserved(ledger, RunCharge("vision"), {"NVIDIA_L4": 2}, 30.0, NOW)
    ledger, charge = rules.settled(ledger, charge, 10.0, NOW)
    stored = parse_team_ledger(ledger.to_document())
    assert stored == ledger
    uses = rules.uses_of(_teams(), {"vision": stored}, NOW)
    use = uses[0]
    assert (use.team, use.month, use.gpus, use.gpus_total) == ("vision", "2026-11", {"NVIDIA_L4": 2}, 2)
    assert (use.reserved_usd, use.settled_usd, use.spent_usd, use.runs) == (30.0, 10.0, 40.0, 2)
    assert use.over == ()
    assert uses[1].team == "speech" and uses[1].gpus == {} and uses[1].spent_usd == 0.0
    # Next month the spend starts again; the GPUs in flight do not.
    later = rules.use_of(vision, stored, datetime(2026, 12, 1, tzinfo=UTC))
    assert (later.month, later.spent_usd, later.gpus_total) == ("2026-12", 0.0, 2)
    assert parse_run_charge(charge.to_dict()) == charge and not charge.held and charge.settled_usd == 10.0
    assert speech.name == "speech"


def test_a_team_at_its_cap_or_budget_shows_it() -> None:
    vision = _teams().teams[0]
    ledger, _ = rules.reserved(None, RunCharge("vision"), {"NVIDIA_TESLA_T4": 4}, 99.0, NOW)
    use = rules.use_of(vision, ledger, NOW)
    assert use.over == ("gpus NVIDIA_TESLA_T4 4/4",)
    ledger, _ = rules.reserved(ledger, RunCharge("vision"), {"NVIDIA_L4": 4}, 1.0, NOW)
    over = rules.use_of(vision, ledger, NOW).over
    assert over == ("gpus all 8/8", "gpus NVIDIA_TESLA_T4 4/4", "budget $100.00/$100.00")


@pytest.mark.parametrize(
    ("in_flight", "spent", "gpus", "estimate", "verdict", "said"),
    [
        ({}, 0.0, {"NVIDIA_TESLA_T4": 2}, 10.0, Verdict.FITS, ""),
        ({}, 0.0, {}, 10.0, Verdict.FITS, ""),
        ({}, 0.0, {"NVIDIA_TESLA_T4": 5}, 10.0, Verdict.REJECT, "above team 'vision''s cap of 4 GPUs"),
        ({}, 0.0, {"NVIDIA_L4": 9}, 10.0, Verdict.REJECT, "cap of 8 GPUs (all)"),
        ({}, 0.0, {}, 40.5, Verdict.REJECT, "hard limit of $40.00 per run (max_run_usd)"),
        ({"NVIDIA_TESLA_T4": 3}, 0.0, {"NVIDIA_TESLA_T4": 2}, 1.0, Verdict.WAIT_CAP, "has 3 of its 4 GPUs"),
        ({"NVIDIA_L4": 7}, 0.0, {"NVIDIA_TESLA_T4": 2}, 1.0, Verdict.WAIT_CAP, "7 of its 8 GPUs (all)"),
        ({"NVIDIA_L4": 7}, 0.0, {}, 1.0, Verdict.FITS, ""),
        ({}, 80.0, {}, 30.0, Verdict.WAIT_BUDGET, "$80.00 of its $100.00 monthly budget"),
        ({}, 70.0, {}, 30.0, Verdict.FITS, ""),
        ({}, 99.99, {}, 0.0312, Verdict.WAIT_BUDGET, "this run is estimated at $0.0312: it waits"),
    ],
)
def test_admission(
    in_flight: dict[str, int], spent: float, gpus: dict[str, int], estimate: float, verdict: Verdict, said: str
) -> None:
    vision = _teams().teams[0]
    ledger = TeamLedger(team="vision", gpus=in_flight)
    if spent:
        ledger, _ = rules.reserved(ledger, RunCharge("vision"), {}, spent, NOW)
    admission = rules.admit(vision, ledger, gpus, estimate, NOW)
    assert admission.verdict == verdict
    assert said in admission.message


def test_settling_is_once_and_releases_what_was_held() -> None:
    ledger, charge = rules.reserved(None, RunCharge("vision"), {"NVIDIA_TESLA_T4": 4}, 12.5, NOW)
    assert charge.held and charge.month == "2026-11" and ledger.gpus == {"NVIDIA_TESLA_T4": 4}
    after, done = rules.settled(ledger, charge, 3.25, datetime(2026, 12, 2, tzinfo=UTC))
    assert after.gpus == {} and not done.held
    # Settled in the month it was reserved in, not the month it ended in.
    assert after.month("2026-11").reserved_usd == 0.0 and after.month("2026-11").settled_usd == 3.25
    assert after.month("2026-12").total_usd == 0.0
    again, same = rules.settled(after, done, 3.25, NOW)
    assert again == after and same == done


def test_the_ledger_keeps_a_bounded_number_of_months() -> None:
    ledger: TeamLedger | None = None
    for month in range(1, 13):
        ledger, _ = rules.reserved(ledger, RunCharge("v"), {}, 1.0, datetime(2025, month, 1, tzinfo=UTC))
    for month in range(1, 13):
        ledger, _ = rules.reserved(ledger, RunCharge("v"), {}, 1.0, datetime(2026, month, 1, tzinfo=UTC))
    assert ledger is not None and len(ledger.months) == 13 and min(ledger.months) == "2025-12"
    assert replace(ledger, months={}).months == {}
