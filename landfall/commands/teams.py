"""`landfall teams`: each team's use against its limits (GPUs in flight per kind, the month's reserved and settled
spend), from the teams file and the team ledgers (docs/teams.md)."""

from __future__ import annotations

import argparse
import json

from landfall.tables import render_table
from landfall.words import gpus_in_flight, spend_text


def cmd_teams(args: argparse.Namespace) -> int:
    from landfall.queries.teams import team_usage

    uses = team_usage()
    if args.json:
        print(json.dumps([u.to_dict() for u in uses], indent=2))
        return 0
    if not uses:
        print(
            "no teams: every run is allowed (add [[teams]] to deploy/teams.toml, or point LANDFALL_TEAMS_FILE at a "
            "teams file; docs/teams.md)"
        )
        return 0
    rows = [
        [
            u.team,
            u.priority,
            gpus_in_flight(u.gpus, u.gpu_cap),
            f"{spend_text(u.spent_usd)} / {spend_text(u.budget_usd)}",
            spend_text(u.reserved_usd),
            spend_text(u.settled_usd),
            u.runs,
            "; ".join(u.over) or "-",
        ]
        for u in uses
    ]
    month = uses[0].month
    print(
        render_table(
            ["TEAM", "PRIORITY", "GPUS IN FLIGHT", f"SPENT {month}", "RESERVED", "SETTLED", "RUNS", "AT LIMIT"], rows
        )
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "teams",
        help="each team's use against its limits: GPUs in flight, the month's spend",
        description="Each team of the teams file (LANDFALL_TEAMS_FILE, else deploy/teams.toml) with its GPUs in "
        "flight against its caps and this month's spend (estimates reserved for runs in flight plus actual costs "
        "settled) against its monthly budget, from the team ledgers the dispatcher keeps (docs/teams.md).",
    )
    p.add_argument("--json", action="store_true", help="print the teams' use as JSON")
    p.set_defaults(func=cmd_teams)
