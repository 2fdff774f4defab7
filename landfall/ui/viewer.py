"""Who is looking, and what they may see and do (docs/teams.md "Who sees what").

With a teams file that says who is who (a team's `members`, or `operators`), the dashboard shows each caller only
their teams' runs (and the datasets, models and spend of their teams) and acts only on their teams' runs; operators
see and act on all. A caller the file does not name sees nothing (fail closed). Without members or operators in the
file, everyone who may open the dashboard sees every run, as before teams had members.

The caller:
- `LANDFALL_UI_IDENTITY` (`landfall ui --as user:a@example.com`): the identity chosen for a dashboard on the local
  stack, where nothing vouches for a caller;
- deployed, the caller Cloud Run's IAM check let in: the Google-signed ID token in the request's Authorization header,
  which Cloud Run checked before the request reached the service (`--invoker-iam-check`); its `email` claim names
  the caller (read, not verified again here).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from deploy.teams import Teams, TeamsError, principals
from landfall.errors import CommandError
from landfall.ui.source import RunsQuery, Source
from schemas.run_record import RunRecord

if TYPE_CHECKING:
    from functions.operations import TeamUse
    from landfall.dead_letter_report import DeadLetter

IDENTITY_ENV = "LANDFALL_UI_IDENTITY"


class NotYours(CommandError):
    """A run of a team the caller is not a member of (the page answers 403)."""


@dataclass(frozen=True)
class Viewer:
    """The caller, as the teams file knows them."""

    principal: str
    """user:EMAIL (or serviceAccount:EMAIL, group:..., as chosen); "" when no one vouched for the caller."""
    teams: tuple[str, ...]
    """The teams they are a member of."""
    operator: bool = False

    def sees(self, team: str | None) -> bool:
        return self.operator or (team is not None and team in self.teams)

    def who(self) -> str:
        if not self.principal:
            return "an unidentified caller"
        if self.operator:
            return f"{self.principal} (operator)"
        teams = ", ".join(self.teams)
        return f"{self.principal} (member of {teams})" if teams else f"{self.principal} (member of no team)"


def viewer_for(principal: str, teams: Teams) -> Viewer | None:
    """The caller as the teams file knows them; None when the file says nobody is anyone's (every run shown)."""
    if not teams.scoped:
        return None
    if not principal:
        return Viewer("", ())
    return Viewer(principal, teams.teams_of(principal), teams.is_operator(principal))


def chosen_identity(env: Mapping[str, str] | None = None) -> str:
    """LANDFALL_UI_IDENTITY, checked ("" when unset)."""
    text = (os.environ if env is None else env).get(IDENTITY_ENV, "").strip()
    if not text:
        return ""
    try:
        return principals([text], IDENTITY_ENV)[0]
    except TeamsError as exc:
        raise CommandError(str(exc)) from exc


def token_identity(authorization: str) -> str:
    """The caller an ID token in an Authorization header names (user:EMAIL, or serviceAccount:EMAIL for a service
    account's), "" when the header holds none."""
    scheme, _, token = authorization.partition(" ")
    parts = token.split(".")
    if scheme.lower() != "bearer" or len(parts) < 2:
        return ""
    try:
        claims: Any = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return ""
    email = claims.get("email") if isinstance(claims, dict) else None
    if not isinstance(email, str) or "@" not in email:
        return ""
    return f"serviceAccount:{email}" if email.endswith(".gserviceaccount.com") else f"user:{email}"


class ScopedSource:
    """A Source showing `viewer` only their teams' runs, datasets, models and spend, and acting only on their runs."""

    def __init__(self, inner: Source, viewer: Viewer, file: Teams) -> None:
        self.inner = inner
        self.viewer = viewer
        self.file = file

    def _doc_team(self, doc: Mapping[str, Any]) -> str | None:
        charge = doc.get("team")
        name = charge.get("name") if isinstance(charge, dict) else None
        return name if isinstance(name, str) else None

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
        return [d for d in self.inner.runs(query, limit * 4) if self._doc_team(d) in v.teams][:limit]

    def run(self, run_id: str) -> RunRecord:
        record = self.inner.run(run_id)
        team = record.team.name if record.team is not None else None
        if not self.viewer.sees(team):
            whose = f"team {team!r}'s" if team else "no team's"
            raise NotYours(
                f"run {run_id} is {whose}, and you are {self.viewer.who()}: ask an operator, or to be added to the "
                "team's members in the teams file"
            )
        return record

    def log_lines(self, run: RunRecord) -> tuple[list[str], str]:
        return self.inner.log_lines(self.run(run.run_id))

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


__all__ = ["IDENTITY_ENV", "NotYours", "ScopedSource", "Viewer", "chosen_identity", "token_identity", "viewer_for"]
