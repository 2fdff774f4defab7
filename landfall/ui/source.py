"""Where the dashboard reads and acts: the CLI's read side (landfall/queries/, what `landfall runs`, `run`, `logs`,
`datasets`, `models`, `teams` and `dead-letters` read) and its actions (`landfall cancel`, `landfall retry`), over the
same clients and the same environment. Nothing here talks to a client the CLI does not; the pages get a Source, so
tests can hand them a fake."""

from __future__ import annotations

import getpass
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from landfall.errors import CommandError
from landfall.queries.datasets import list_datasets
from landfall.queries.dead_letters import dead_letters as read_dead_letters
from landfall.queries.dead_letters import orphans as read_orphans
from landfall.queries.models import held_decisions, model_versions
from landfall.queries.runs import read_run, recent_runs
from landfall.queries.teams import team_usage
from schemas.run_record import RunRecord

if TYPE_CHECKING:
    from functions.operations import TeamUse
    from landfall.dead_letter_report import DeadLetter

ACTIONS_ENV = "LANDFALL_UI_ACTIONS"
"""Comma list of the actions the dashboard offers (cancel, retry); unset or empty: read-only."""
KNOWN_ACTIONS = ("cancel", "retry")
DEAD_LETTERS_SHOWN = 50
"""Dead letters the dashboard's page reads at most."""


def allowed_actions(env: dict[str, str] | None = None) -> frozenset[str]:
    """LANDFALL_UI_ACTIONS read once: the actions it names; an unknown one is refused with the known ones."""
    text = (os.environ if env is None else env).get(ACTIONS_ENV, "")
    names = {part.strip().lower() for part in text.split(",") if part.strip()}
    unknown = names - set(KNOWN_ACTIONS)
    if unknown:
        raise CommandError(
            f"{ACTIONS_ENV}={text!r} names {', '.join(sorted(unknown))}; the dashboard's actions are "
            f"{', '.join(KNOWN_ACTIONS)} (comma separated), or leave it unset for a read-only dashboard"
        )
    return frozenset(names)


@dataclass(frozen=True)
class RunsQuery:
    """The runs page's filters and where its page starts (a run id: the last one of the previous page)."""

    state: str | None = None
    dataset: str | None = None
    team: str | None = None
    since: datetime | None = None
    after: str | None = None


class Source(Protocol):
    """What the pages read and do. Runs, datasets and orphans come as their stored documents (a page reads them
    through the schema and lists those that do not fit: landfall/queries/ parse_runs, read_dataset, parse_orphans);
    the rest as the read side returns them."""

    def runs(self, query: RunsQuery, limit: int) -> list[dict[str, Any]]: ...
    def run(self, run_id: str) -> RunRecord: ...
    def log_lines(self, run: RunRecord) -> tuple[list[str], str]: ...
    def datasets(self, limit: int) -> list[dict[str, Any]]: ...
    def models(self) -> list[Any]: ...
    def model_decisions(self, versions: list[Any]) -> dict[str, str]: ...
    def dead_letters(self) -> tuple[str, list[DeadLetter]]: ...
    def orphans(self, limit: int) -> list[dict[str, Any]]: ...
    def teams(self) -> list[TeamUse]: ...
    def cancel(self, run_id: str) -> str: ...
    def retry(self, run_id: str) -> str: ...
    def project(self) -> str: ...


class LandfallSource:
    """The Source over the deployment the environment names (the local stack's `.landfall/env`, or Google Cloud)."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir = state_dir

    def runs(self, query: RunsQuery, limit: int) -> list[dict[str, Any]]:
        return recent_runs(query.state, limit, query.dataset, query.since, team=query.team, after=query.after)

    def run(self, run_id: str) -> RunRecord:
        return read_run(run_id, "run")

    def log_lines(self, run: RunRecord) -> tuple[list[str], str]:
        """The chief replica's log lines and, where the logs are not here (Google Cloud), how to read them."""
        from landfall.commands.logs import chief_log, cloud_logging_commands

        if run.vertex is None:
            return [], "no Vertex job yet"
        if not os.environ.get("LANDFALL_VERTEX_ENDPOINT"):
            return [], cloud_logging_commands(run)
        from deploy.local.provision import default_state_dir

        chief = chief_log(self.state_dir or default_state_dir(), run.vertex.job_id)
        if chief is None:
            return [], "the job has not written a log yet"
        return chief.read_text(errors="replace").splitlines(), chief.name

    def datasets(self, limit: int) -> list[dict[str, Any]]:
        return list_datasets(None, limit)

    def models(self) -> list[Any]:
        return model_versions()

    def model_decisions(self, versions: list[Any]) -> dict[str, str]:
        """The decision that holds now for each version, as its run records it (held_decisions)."""
        return held_decisions(versions)

    def dead_letters(self) -> tuple[str, list[DeadLetter]]:
        return read_dead_letters(DEAD_LETTERS_SHOWN)

    def orphans(self, limit: int) -> list[dict[str, Any]]:
        return read_orphans(limit)

    def teams(self) -> list[TeamUse]:
        """Each team's use against its limits: what `landfall teams` reads."""
        return team_usage()

    def cancel(self, run_id: str) -> str:
        from landfall.commands.operations import cancel

        return cancel(run_id, by=f"{getpass.getuser()} (dashboard)")

    def retry(self, run_id: str) -> str:
        from landfall.commands.retry import retry_run

        return retry_run(run_id)[1]

    def project(self) -> str:
        from functions.settings import get_settings

        return get_settings().project


def tail(lines: Sequence[str], count: int, replica: str = "workerpool0-0") -> list[str]:
    """The last `count` log lines as text (`landfall logs`' form: time, replica, message, fields)."""
    from landfall.trainer_log import text_line

    return [text_line(replica, line) for line in lines[-count:]]
