"""`landfall ui [--port N]`: serve the dashboard (this package, docs/ui.md) for the stack or project the CLI reads,
and print its URL."""

from __future__ import annotations

import argparse

from landfall.commands.runs import positive


def cmd_ui(args: argparse.Namespace) -> int:
    import os

    from landfall.access import IDENTITY_ENV
    from landfall.ui.__main__ import serve

    if args.as_identity:
        os.environ[IDENTITY_ENV] = args.as_identity  # checked when the app is built
    serve(args.host, args.port)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from landfall.ui.__main__ import DEFAULT_HOST, DEFAULT_PORT

    p = sub.add_parser(
        "ui",
        help="serve the web dashboard (runs, plans, datasets, models, teams) and print its URL",
        description="A read-only web dashboard over the records `landfall runs`, `run`, `logs`, `datasets`, "
        "`models` and `dead-letters` read; LANDFALL_UI_ACTIONS=cancel,retry offers those actions behind a "
        "confirmation (docs/ui.md). Ctrl-C stops it.",
    )
    p.add_argument("--port", type=positive, default=DEFAULT_PORT, metavar="N", help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    p.add_argument(
        "--as",
        dest="as_identity",
        metavar="PRINCIPAL",
        help="see the dashboard as this caller (user:a@example.com): with members or operators in the teams file, "
        "a member sees only their teams' runs (LANDFALL_IDENTITY; docs/teams.md)",
    )
    p.set_defaults(func=cmd_ui)
