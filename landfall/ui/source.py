"""Where the dashboard reads and acts: the CLI's own read code (`landfall runs`, `run`, `logs`, `watch`,
`datasets`, `models`, `dead-letters`) and its actions (`landfall cancel`, `landfall retry`), over the same clients
and the same environment. Nothing here talks to a client the CLI does not; the pages get a Source, so tests can
hand them a fake."""

from __future__ import annotations

import getpass
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from landfall.errors import CommandError, client_boundary
from schemas.run_record import RunRecord

if TYPE_CHECKING:
    from functions.operations import TeamUse

ACTIONS_ENV = "LANDFALL_UI_ACTIONS"
"""Comma list of the actions the dashboard offers (cancel, retry); unset or empty: read-only."""
KNOWN_ACTIONS = ("cancel", "retry")


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
    def runs(self, query: RunsQuery, limit: int) -> list[dict[str, Any]]: ...
    def run(self, run_id: str) -> RunRecord: ...
    def log_lines(self, run: RunRecord) -> tuple[list[str], str]: ...
    def datasets(self, limit: int) -> list[dict[str, Any]]: ...
    def models(self) -> list[Any]: ...
    def dead_letters(self) -> tuple[str, list[Any]]: ...
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
        from landfall.commands.runs import recent_runs

        return recent_runs(query.state, limit, query.dataset, query.since, team=query.team, after=query.after)

    def run(self, run_id: str) -> RunRecord:
        from landfall.commands.runs import read_run

        return read_run(run_id, "run")

    def log_lines(self, run: RunRecord) -> tuple[list[str], str]:
        """The chief replica's log lines and, where the logs are not here (Google Cloud), how to read them."""
        from landfall.commands.logs import cloud_logging_commands, replica_logs

        if run.vertex is None:
            return [], "no Vertex job yet"
        if not os.environ.get("LANDFALL_VERTEX_ENDPOINT"):
            return [], cloud_logging_commands(run)
        from deploy.local.provision import default_state_dir

        paths = replica_logs(self.state_dir or default_state_dir(), run.vertex.job_id)
        chief = paths.get("workerpool0-0") or next(iter(paths.values()), None)
        if chief is None:
            return [], "the job has not written a log yet"
        return chief.read_text(errors="replace").splitlines(), chief.name

    def datasets(self, limit: int) -> list[dict[str, Any]]:
        from landfall.commands.datasets import list_datasets

        return list_datasets(None, limit)

    def models(self) -> list[Any]:
        from functions.wiring import model_registry

        registry = model_registry()
        with client_boundary("list Vertex AI Model Registry models"):
            return [v for m in registry.models() for v in registry.versions(m.model_id)]

    def dead_letters(self) -> tuple[str, list[Any]]:
        from landfall.commands.dead_letters import dead_letters

        return dead_letters(50)

    def orphans(self, limit: int) -> list[dict[str, Any]]:
        from google.cloud import firestore

        from functions.operations import firestore_client
        from functions.settings import get_settings

        with client_boundary("read the orphans from Firestore"):
            collection = firestore_client().collection(get_settings().orphans_collection)
            query = collection.order_by("found_at", direction=firestore.Query.DESCENDING).limit(limit)
            return [doc for d in query.stream(timeout=20.0) if (doc := d.to_dict()) is not None]

    def teams(self) -> list[TeamUse]:
        """Each team's use against its limits: the function `landfall teams` calls."""
        from deploy.teams import TeamsError
        from functions.errors import LandfallError
        from functions.wiring import team_usage

        with client_boundary("read the team ledgers"):
            try:
                return team_usage()
            except TeamsError as exc:
                raise CommandError(str(exc)) from exc
            except LandfallError as exc:
                raise CommandError(f"cannot read the team ledgers: {exc}") from exc

    def cancel(self, run_id: str) -> str:
        from functions.errors import LandfallError
        from functions.operations import cancel_run
        from functions.wiring import runs_store, vertex_jobs

        with client_boundary("cancel the run"):
            try:
                return cancel_run(
                    run_id,
                    by=f"{getpass.getuser()} (dashboard)",
                    store=runs_store(),
                    vertex=vertex_jobs(),
                    now=datetime.now(UTC),
                )
            except LandfallError as exc:
                raise CommandError(str(exc)) from exc

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
