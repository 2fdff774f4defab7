"""What the dashboard shows and does for a caller (docs/teams.md "Who sees what"; the caller: landfall/access.py).

With a teams file that says who is who (a team's `members`, or `operators`), the dashboard shows each caller only
their teams' runs (and the datasets, models and spend of their teams) and acts only on their teams' runs; operators
see and act on all. A caller the file does not name sees nothing (fail closed). Without members or operators in the
file, everyone who may open the dashboard sees every run, as before teams had members.

The caller:
- `LANDFALL_IDENTITY` (`landfall ui --as user:a@example.com`): the identity chosen for a dashboard on the local
  stack, where nothing vouches for a caller;
- deployed, the caller Cloud Run's IAM check let in: the Google-signed ID token of the header Cloud Run checked, its
  signature verified again (landfall/access.py request_identity).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from deploy.teams import Teams
from landfall.access import NotYours, Viewer, check_visible, visible_docs
from landfall.errors import CommandError
from landfall.ui.source import RunsQuery, Source
from schemas.run_record import RunRecord

if TYPE_CHECKING:
    from functions.operations import TeamUse
    from landfall.dead_letter_report import DeadLetter


class ScopedSource:
    """A Source showing `viewer` only their teams' runs, datasets, models and spend, and acting only on their runs."""

    def __init__(self, inner: Source, viewer: Viewer, file: Teams) -> None:
        self.inner = inner
        self.viewer = viewer
        self.file = file

    def runs(self, query: RunsQuery, limit: int) -> list[dict[str, Any]]:
        v = self.viewer
        if v.operator:
            return self.inner.runs(query, limit)
        if query.team is not None:
            return self.inner.runs(query, limit) if query.team in v.teams else []
        if not v.teams:
            return []
        if len(v.teams) == 1:
            return self.inner.runs(replace(query, team=v.teams[0]), limit)
        # A member of several teams: the newest runs, theirs kept (a page may come out shorter than the limit).
        return visible_docs(self.inner.runs(query, limit * 4), v)[:limit]

    def run(self, run_id: str) -> RunRecord:
        record = self.inner.run(run_id)
        check_visible(record, self.viewer)
        return record

    def log_lines(self, run: RunRecord) -> tuple[list[str], str]:
        check_visible(run, self.viewer)  # the record in hand: no second read
        return self.inner.log_lines(run)

    def datasets(self, limit: int) -> list[dict[str, Any]]:
        docs = self.inner.datasets(limit)
        if self.viewer.operator:
            return docs
        return [d for d in docs if self._owner(str(d.get("uri", ""))) in self.viewer.teams]

    def _owner(self, uri: str) -> str | None:
        bucket, _, prefix = uri.removeprefix("gs://").partition("/")
        owner = self.file.owner_of(bucket, prefix)
        return owner.name if owner is not None else None

    def models(self) -> list[Any]:
        versions = self.inner.models()
        if self.viewer.operator:
            return versions
        return [v for v in versions if self._run_visible(str(v.labels.get("landfall-run", "")))]

    def _run_visible(self, run_id: str) -> bool:
        if not run_id:
            return False
        try:
            self.run(run_id)
        except CommandError:
            return False
        return True

    def model_decisions(self, versions: list[Any]) -> dict[str, str]:
        return self.inner.model_decisions(versions)

    def dead_letters(self) -> tuple[str, list[DeadLetter]]:
        if not self.viewer.operator:
            raise NotYours(f"dead letters are the operators' to read, and you are {self.viewer.who()}")
        return self.inner.dead_letters()

    def orphans(self, limit: int) -> list[dict[str, Any]]:
        if not self.viewer.operator:
            raise NotYours(f"orphan jobs are the operators' to read, and you are {self.viewer.who()}")
        return self.inner.orphans(limit)

    def teams(self) -> list[TeamUse]:
        uses = self.inner.teams()
        return uses if self.viewer.operator else [u for u in uses if u.team in self.viewer.teams]

    def cancel(self, run_id: str) -> str:
        self.run(run_id)
        return self.inner.cancel(run_id)

    def retry(self, run_id: str) -> str:
        self.run(run_id)
        return self.inner.retry(run_id)

    def project(self) -> str:
        return self.inner.project()


__all__ = ["ScopedSource"]
