"""Who is asking, as the teams file knows them (docs/teams.md "Who sees what"): the dashboard's caller and the CLI's
user alike. With members or operators in the teams file, a member sees and acts on their teams' runs only, an
operator on all, and a caller the file names nowhere on none; without, everyone on everything.

Who the caller is:
- `LANDFALL_IDENTITY` (`landfall ui --as user:a@example.com`): the identity chosen where nothing vouches for one (the
  local stack), for the dashboard and the CLI; the CLI's Cloud Storage calls on the local stack go as it too, held to
  that member's grants by the stack's storage gate (`act_as_chosen_identity`);
- the dashboard, deployed: the caller Cloud Run's IAM check let in (`request_identity`: the Google-signed ID token's
  email claim, its signature verified);
- the CLI: the account gcloud uses (`gcloud config get-value account`), asked only when the file names members or
  operators.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from deploy.teams import Teams, TeamsError, principals
from deploy.topology import PRINCIPAL_PATH, PUBSUB_GATE_ENV, storage_as
from landfall.errors import CommandError
from schemas.run_record import RunRecord

IDENTITY_ENV = "LANDFALL_IDENTITY"


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


def act_as_chosen_identity(environ: MutableMapping[str, str]) -> str:
    """On the local stack, make this process's Cloud Storage calls and Pub/Sub publishes as LANDFALL_IDENTITY, as a
    member's own credentials make them in a project: the stack's storage and Pub/Sub gates then hold them to that
    member's grants (object create, read and list on the team's prefixes and code folder, publish on the team's
    topic; docs/access.md). The identity, or "" (no identity,
    or no local stack: the calls go as gcloud's credentials, or the stack's owner, as before)."""
    identity = chosen_identity(environ)
    storage = environ.get("STORAGE_EMULATOR_HOST", "")
    if identity and storage and PRINCIPAL_PATH not in storage:
        environ["STORAGE_EMULATOR_HOST"] = storage_as(storage, identity)
        if environ.get(PUBSUB_GATE_ENV):  # its publishes too, through the stack's Pub/Sub gate
            environ["PUBSUB_EMULATOR_HOST"] = environ[PUBSUB_GATE_ENV]
        return identity
    return ""


def chosen_identity(env: Mapping[str, str] | None = None) -> str:
    """LANDFALL_IDENTITY, checked ("" when unset)."""
    text = (os.environ if env is None else env).get(IDENTITY_ENV, "").strip()
    if not text:
        return ""
    try:
        return principals([text], IDENTITY_ENV)[0]
    except TeamsError as exc:
        raise CommandError(str(exc)) from exc


def request_identity(headers: Mapping[str, str], verify: Callable[[str], Mapping[str, Any]] | None = None) -> str:
    """The caller a request's Google-signed ID token names, verified (signature, issuer, expiry: google-auth), ""
    when it holds none or one that does not verify. Cloud Run's IAM check reads X-Serverless-Authorization when a
    request carries it and Authorization otherwise, and passes the other through unchecked: so the identity comes
    from the header Cloud Run checked, and is verified here again in any case (a forged token names no one)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    header = lowered.get("x-serverless-authorization") or lowered.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or token.count(".") != 2:
        return ""
    try:
        claims = (verify or _google_verified)(token)
    except Exception:  # an expired, forged or unreadable token names no one
        return ""
    email = claims.get("email")
    if not isinstance(email, str) or "@" not in email or claims.get("email_verified") is False:
        return ""
    return account_principal(email)


def _google_verified(token: str) -> Mapping[str, Any]:
    """The claims of a Google-signed ID token, its signature checked against Google's keys (fetched and cached by
    google-auth), its issuer and expiry too."""
    from google.auth.transport.requests import Request
    from google.oauth2 import id_token

    claims: Mapping[str, Any] = id_token.verify_oauth2_token(token, Request())
    return claims


def account_principal(account: str) -> str:
    """The IAM principal of an account's email: serviceAccount: for a .gserviceaccount.com address, else user:."""
    return f"serviceAccount:{account}" if account.endswith(".gserviceaccount.com") else f"user:{account}"


@cache
def gcloud_account() -> str:
    """The account gcloud uses, as a principal ("" when gcloud is missing or has none); asked once a process."""
    try:
        done = subprocess.run(
            ["gcloud", "config", "get-value", "account"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    account = done.stdout.strip()
    return account_principal(account) if done.returncode == 0 and "@" in account else ""


def cli_viewer() -> Viewer | None:
    """The CLI's user as the teams file knows them; None when it names no members or operators (everything shown)."""
    from functions.wiring import teams

    try:
        known = teams()
    except (TeamsError, ValueError) as exc:
        raise CommandError(f"the teams file cannot be read: {exc}") from exc
    if not known.scoped:
        return None
    return viewer_for(chosen_identity() or gcloud_account(), known)


def check_visible(run: RunRecord, viewer: Viewer | None) -> None:
    """Refuse a run of a team the viewer is not a member of (NotYours); nothing when everything is shown."""
    _check(run.run_id, run.team.name if run.team is not None else None, viewer)


def check_visible_doc(run_id: str, doc: Mapping[str, Any] | None, viewer: Viewer | None) -> None:
    """check_visible for a stored run document (None: no run, left to the caller to say)."""
    if doc is not None:
        _check(run_id, doc_team(doc), viewer)


def visible_run(run_id: str, command: str) -> RunRecord:
    """The run as `landfall COMMAND RUN_ID` reads it (landfall/queries/runs.py read_run), refused when it is a team's
    the CLI's user is not a member of."""
    from landfall.queries.runs import read_run

    run = read_run(run_id, command)
    check_visible(run, cli_viewer())
    return run


def _check(run_id: str, team: str | None, viewer: Viewer | None) -> None:
    if viewer is not None and not viewer.sees(team):
        whose = f"to team {team!r}" if team else "to no team"
        raise NotYours(
            f"run {run_id} belongs {whose}, and you are {viewer.who()}: ask an operator, or to be added to the "
            "team's members in the teams file"
        )


def doc_team(doc: Mapping[str, Any]) -> str | None:
    """The team a stored run document is charged to."""
    charge = doc.get("team")
    name = charge.get("name") if isinstance(charge, dict) else None
    return name if isinstance(name, str) else None


def visible_docs(docs: Iterable[dict[str, Any]], viewer: Viewer | None) -> list[dict[str, Any]]:
    """The run documents the viewer may see."""
    return list(docs) if viewer is None else [d for d in docs if viewer.sees(doc_team(d))]


__all__ = [
    "IDENTITY_ENV",
    "NotYours",
    "Viewer",
    "account_principal",
    "check_visible",
    "check_visible_doc",
    "chosen_identity",
    "cli_viewer",
    "doc_team",
    "gcloud_account",
    "request_identity",
    "viewer_for",
    "visible_docs",
    "visible_run",
]
