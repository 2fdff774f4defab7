"""Each team's use against its limits, as `landfall teams` and the dashboard's teams page read it: the teams file
(LANDFALL_TEAMS_FILE, else deploy/teams.toml) and the team ledgers the dispatcher keeps (docs/teams.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from landfall.errors import CommandError, client_boundary

if TYPE_CHECKING:
    from functions.operations import TeamUse


def team_usage() -> list[TeamUse]:
    """Each team's use now, in the teams file's order; a bad teams file or a ledger that cannot be read is a
    CommandError saying which."""
    from deploy.teams import TeamsError
    from functions.errors import LandfallError
    from functions.wiring import team_usage as usage

    with client_boundary("read the team ledgers"):
        try:
            return usage()
        except TeamsError as exc:
            raise CommandError(str(exc)) from exc
        except LandfallError as exc:
            raise CommandError(f"cannot read the team ledgers: {exc}") from exc
