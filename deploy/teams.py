"""Teams from deploy/teams.toml: which datasets each team owns, its GPU caps, monthly budget, hard limit per run,
priority and optional requests topic (docs/teams.md). Data apart from logic: this module only loads and checks the
file; the dispatcher's ledger rules (functions/records/team_ledger.py) and `landfall teams` read teams through it.

The shipped file is package data of deploy/ and holds no teams: every run is allowed, as before teams existed.
LANDFALL_TEAMS_FILE (the settings' teams_file) points at another.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from schemas.gpus import load_gpus

TEAMS_FILE = resources.files("deploy").joinpath("teams.toml")
SCHEMA_VERSION = 1
ALL_GPUS = "all"
"""The [teams.gpu_cap] key that caps every GPU kind together."""
UNOWNED_POLICIES = ("allow", "reject")
REQUESTS_SUBSCRIPTION_SUFFIX = "-dispatch"
"""A team's requests topic T reaches the dispatcher through the subscription T-dispatch."""
CODE_FOLDER = "teams/{team}/"
"""A team's folder in the code bucket: `landfall submit --team` uploads there, and its members may create objects
there (deploy/gcp/team_access.py)."""
_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")
_TEAM_KEYS = frozenset(
    {"name", "owns", "priority", "monthly_budget_usd", "max_run_usd", "requests_topic", "gpu_cap", "members"}
)
PRINCIPAL_KINDS = ("user", "group", "serviceAccount", "domain")
"""How a member or operator is named, as IAM names principals: `user:a@example.com`, `group:g@example.com`,
`serviceAccount:s@p.iam.gserviceaccount.com`, `domain:example.com`."""
_PRINCIPAL = re.compile(r"^(user|group|serviceAccount|domain):[A-Za-z0-9._%+@-]+$")


def code_folder(team: str) -> str:
    return CODE_FOLDER.format(team=team)


def team_account_id(team: str) -> str:
    """The IAM account id of a team's own trainer identity (6-30 lower-case letters, digits and '-'): `lf-team-NAME`,
    a long name cut and followed by a digest of it, so two teams never share one."""
    whole = f"lf-team-{team}"
    if len(whole) <= 30:
        return whole
    digest = hashlib.sha256(team.encode()).hexdigest()[:6]
    return f"{whole[:23].rstrip('-')}-{digest}"


def is_team_name(text: str) -> bool:
    """Whether text is a team's name as the teams file must give it: lower-case letters, digits and '-', starting
    with a letter and not ending with '-' (its trainer identity's account id may end with it), at most 40."""
    return _NAME.fullmatch(text) is not None


class TeamsError(ValueError):
    """The teams file is malformed; the message says what was expected and what to do."""


@dataclass(frozen=True)
class Owned:
    """Data a team owns: objects in a bucket matching `bucket` (a glob) whose names start with `prefix`."""

    bucket: str
    prefix: str
    """"" (the whole bucket) or a folder ending in '/'."""

    def covers(self, bucket: str, prefix: str) -> bool:
        return fnmatch.fnmatchcase(bucket, self.bucket) and prefix.startswith(self.prefix)

    def __str__(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class Team:
    name: str
    owns: tuple[Owned, ...]
    monthly_budget_usd: float
    """What the team's runs may cost per calendar month (UTC): reserved estimates plus settled actual costs."""
    gpu_cap: Mapping[str, int] = field(default_factory=dict)
    """GPUs in flight at once: ALL_GPUS for every kind together and/or per Vertex accelerator type; {} = no cap."""
    priority: int = 0
    """Higher first: among runs waiting for their team's room, which the reconciler retries first."""
    max_run_usd: float | None = None
    """The hard limit of one run's estimated cost (None: the monthly budget): above it a run is REJECTED."""
    requests_topic: str = ""
    """A Pub/Sub topic of the team's own for its TrainingRequests; "" = none (the shared topic only)."""
    members: tuple[str, ...] = ()
    """Who works in the team, as IAM principals (PRINCIPAL_KINDS): they see the team's runs and act on them."""

    def has_member(self, principal: str) -> bool:
        return principal_in(principal, self.members)

    @property
    def requests_subscription(self) -> str:
        """The subscription delivering the team's topic to the dispatcher ("" without a topic): `landfall deploy`
        creates it, and the dispatcher knows the team by it."""
        return f"{self.requests_topic}{REQUESTS_SUBSCRIPTION_SUFFIX}" if self.requests_topic else ""

    @property
    def run_limit_usd(self) -> float:
        """The most one run's estimate may be and still run some day (the hard limit)."""
        return self.monthly_budget_usd if self.max_run_usd is None else self.max_run_usd

    def owns_data(self, bucket: str, prefix: str) -> bool:
        return any(o.covers(bucket, prefix) for o in self.owns)

    def cap_for(self, kind: str) -> int | None:
        """The cap on GPUs of `kind` alone (None: no cap for that kind)."""
        return self.gpu_cap.get(kind)


@dataclass(frozen=True)
class Teams:
    """The teams of one file, checked; empty = no teams (every run allowed, as before teams)."""

    teams: tuple[Team, ...] = ()
    unowned: str = "allow"
    """A request for data no team owns: "allow" (runs, counted against no team) or "reject" (the file's default when
    it has teams)."""
    source: str = ""
    """Where they were read from (for messages)."""
    operators: tuple[str, ...] = ()
    """Who sees every team's runs and acts on any of them (IAM principals), beside the teams' members."""

    @property
    def scoped(self) -> bool:
        """Whether the file says who is who (a team's members or the operators): then the dashboard shows each caller
        only their teams' runs; without, everyone who may open it sees every run, as before."""
        return bool(self.operators) or any(t.members for t in self.teams)

    def teams_of(self, principal: str) -> tuple[str, ...]:
        """The names of the teams `principal` is a member of."""
        return tuple(t.name for t in self.teams if t.has_member(principal))

    def is_operator(self, principal: str) -> bool:
        return principal_in(principal, self.operators)

    def __bool__(self) -> bool:
        return bool(self.teams)

    def named(self, name: str) -> Team | None:
        return next((t for t in self.teams if t.name == name), None)

    def owner_of(self, bucket: str, prefix: str) -> Team | None:
        """The team owning the data at gs://bucket/prefix: the one whose matching `owns` prefix is longest."""
        best: tuple[int, Team] | None = None
        for team in self.teams:
            for owned in team.owns:
                if owned.covers(bucket, prefix) and (best is None or len(owned.prefix) > best[0]):
                    best = (len(owned.prefix), team)
        return None if best is None else best[1]

    def by_topic(self, topic: str) -> Team | None:
        """The team whose own requests topic is `topic` (its short name), if any."""
        short = topic.rsplit("/", 1)[-1]
        return next((t for t in self.teams if t.requests_topic and t.requests_topic == short), None)

    def by_subscription(self, subscription: str) -> Team | None:
        """The team whose requests topic's dispatcher subscription is `subscription` (full or short name), if any."""
        short = subscription.rsplit("/", 1)[-1]
        return next((t for t in self.teams if t.requests_topic and t.requests_subscription == short), None)


def _number(value: object, where: str, *, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise TeamsError(f"{where}: {what} must be a number of dollars >= 0, got {value!r}")
    return float(value)


def _owned(raw: object, where: str) -> Owned:
    example = '{bucket = "*", prefix = "datasets/vision/"}'
    if not isinstance(raw, dict) or set(raw) - {"bucket", "prefix"} or "prefix" not in raw:
        raise TeamsError(f"{where}: expected a table like {example}, got {raw!r}")
    bucket, prefix = raw.get("bucket", "*"), raw["prefix"]
    if not isinstance(bucket, str) or not bucket or not isinstance(prefix, str):
        raise TeamsError(f"{where}: bucket (a glob) and prefix must be text, e.g. {example}")
    if (prefix and not prefix.endswith("/")) or prefix.startswith("/"):
        raise TeamsError(f'{where}: prefix {prefix!r} must be a folder ending in "/" (or "" for the whole bucket)')
    return Owned(bucket, prefix)


def _gpu_cap(raw: object, where: str) -> dict[str, int]:
    if not isinstance(raw, dict):
        raise TeamsError(f"{where}: expected a table of GPU counts, e.g. [teams.gpu_cap] all = 16")
    kinds = load_gpus().kinds
    cap: dict[str, int] = {}
    for key, value in raw.items():
        if key != ALL_GPUS and key not in kinds:
            raise TeamsError(
                f"{where}: {key!r} is not a GPU kind; use {ALL_GPUS!r} or a Vertex accelerator type: {', '.join(kinds)}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TeamsError(f"{where}.{key}: expected a whole number of GPUs >= 0, got {value!r}")
        cap[key] = value
    return cap


def principal_in(principal: str, listed: tuple[str, ...]) -> bool:
    """Whether `principal` (user:EMAIL, ...) is one of `listed`, itself or through a `domain:` entry for its email's
    domain. A `group:` entry matches only that group named as the principal: Landfall does not expand groups (that
    takes the Cloud Identity API), so list the users who read the dashboard, or name the group as the identity."""
    if principal in listed:
        return True
    kind, _, who = principal.partition(":")
    domain = who.rpartition("@")[2] if kind in ("user", "serviceAccount") and "@" in who else ""
    return bool(domain) and f"domain:{domain}" in listed


def principals(raw: object, where: str) -> tuple[str, ...]:
    """A list of IAM principals, checked (PRINCIPAL_KINDS)."""
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise TeamsError(f'{where}: expected a list of principals, e.g. ["user:a@example.com", "group:g@example.com"]')
    bad = [p for p in raw if not _PRINCIPAL.match(p)]
    if bad:
        kinds = ", ".join(f"{k}:..." for k in PRINCIPAL_KINDS)
        raise TeamsError(f"{where}: {bad[0]!r} is not an IAM principal ({kinds}), e.g. user:a@example.com")
    return tuple(dict.fromkeys(raw))


def _team(raw: object, where: str) -> Team:
    if not isinstance(raw, dict):
        raise TeamsError(f"{where}: expected a [[teams]] table")
    unknown = sorted(set(raw) - _TEAM_KEYS)
    if unknown:
        raise TeamsError(f"{where}: unknown keys {unknown}; a team has {', '.join(sorted(_TEAM_KEYS))}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise TeamsError(
            f"{where}: name {name!r} must be lower-case letters, digits and '-', starting with a letter and not ending "
            "with '-' (at most 40)"
        )
    where = f"team {name!r}"
    owns = raw.get("owns")
    if not isinstance(owns, list) or not owns:
        raise TeamsError(f'{where}: owns must list the data it owns, e.g. owns = [{{bucket = "*", prefix = "x/"}}]')
    if "monthly_budget_usd" not in raw:
        raise TeamsError(f"{where}: monthly_budget_usd is required (dollars per calendar month)")
    priority = raw.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TeamsError(f"{where}: priority must be a whole number (higher first), got {priority!r}")
    topic = raw.get("requests_topic", "")
    if not isinstance(topic, str) or (topic and not re.match(r"^[A-Za-z][A-Za-z0-9._~%+-]{2,254}$", topic)):
        raise TeamsError(f"{where}: requests_topic {topic!r} is not a Pub/Sub topic name (its short name)")
    team = Team(
        name=name,
        owns=tuple(_owned(o, f"{where}: owns[{i}]") for i, o in enumerate(owns)),
        monthly_budget_usd=_number(raw["monthly_budget_usd"], where, what="monthly_budget_usd"),
        gpu_cap=MappingProxyType(_gpu_cap(raw.get("gpu_cap", {}), f"{where}: [teams.gpu_cap]")),
        priority=priority,
        max_run_usd=None if raw.get("max_run_usd") is None else _number(raw["max_run_usd"], where, what="max_run_usd"),
        requests_topic=topic,
        members=principals(raw.get("members", []), f"{where}: members"),
    )
    if team.max_run_usd is not None and team.max_run_usd > team.monthly_budget_usd:
        raise TeamsError(
            f"{where}: max_run_usd {team.max_run_usd} is above monthly_budget_usd {team.monthly_budget_usd}: such a "
            "run could never fit the month and would wait for ever; lower max_run_usd or raise the budget"
        )
    return team


def parse_teams(raw: Mapping[str, Any], source: str = "teams.toml") -> Teams:
    """The teams of a parsed file, checked; raises TeamsError naming the team and key that do not fit."""
    version = raw.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise TeamsError(f"{source}: schema_version {version!r} is not {SCHEMA_VERSION}; see deploy/teams.toml")
    unknown = sorted(set(raw) - {"schema_version", "unowned", "operators", "teams"})
    if unknown:
        raise TeamsError(
            f"{source}: unknown top-level keys {unknown}; expected schema_version, unowned, operators, [[teams]]"
        )
    # With teams, data no team owns is rejected unless the file says otherwise: every run then counts against a
    # team's caps and budget; without teams, every run is allowed, as before teams.
    unowned = raw.get("unowned", "reject" if raw.get("teams") else "allow")
    if unowned not in UNOWNED_POLICIES:
        raise TeamsError(f"{source}: unowned {unowned!r} must be one of {', '.join(UNOWNED_POLICIES)}")
    entries = raw.get("teams", [])
    if not isinstance(entries, list):
        raise TeamsError(f"{source}: teams must be [[teams]] tables")
    try:
        teams = tuple(_team(entry, f"{source}: teams[{i}]") for i, entry in enumerate(entries))
    except TeamsError as exc:
        raise TeamsError(f"{source}: {exc}" if not str(exc).startswith(source) else str(exc)) from exc
    names = [t.name for t in teams]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise TeamsError(f"{source}: team names must be unique; {doubled} appear more than once")
    topics = [t.requests_topic for t in teams if t.requests_topic]
    if len(set(topics)) != len(topics):
        raise TeamsError(f"{source}: each team needs its own requests_topic; {topics} repeat one")
    owned = [(o.bucket, o.prefix, t.name) for t in teams for o in t.owns]
    for bucket, prefix, name in owned:
        others = [n for b, p, n in owned if (b, p) == (bucket, prefix) and n != name]
        if others:
            raise TeamsError(
                f"{source}: gs://{bucket}/{prefix} is owned by both {name!r} and {others[0]!r}; give it to one team "
                "(a longer prefix inside it may belong to another)"
            )
    operators = principals(raw.get("operators", []), f"{source}: operators")
    return Teams(teams=teams, unowned=str(unowned), source=source, operators=operators)


def team_topics(env: Mapping[str, str]) -> tuple[Team, ...]:
    """The teams with a requests topic of their own, from the teams file the environment names (LANDFALL_TEAMS_FILE,
    else the shipped file): the local stack creates their topics and subscriptions as `landfall deploy` does."""
    return tuple(t for t in read_teams(env.get("LANDFALL_TEAMS_FILE", "")).teams if t.requests_topic)


def read_teams(path: Traversable | Path | str | None = None) -> Teams:
    """The teams in path (default, or "": the shipped teams.toml, which holds none), checked."""
    where: Traversable | Path = (
        TEAMS_FILE if path is None or path == "" else Path(path) if isinstance(path, str) else path
    )
    try:
        raw = tomllib.loads(where.read_text())
    except FileNotFoundError as exc:
        raise TeamsError(
            f"teams file {where} does not exist; set LANDFALL_TEAMS_FILE to an existing file, or unset it for "
            "deploy/teams.toml"
        ) from exc
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TeamsError(f"cannot read teams from {where}: {exc}; fix the TOML (see deploy/teams.toml)") from exc
    return parse_teams(raw, source=str(where))


__all__ = [
    "ALL_GPUS",
    "TEAMS_FILE",
    "Owned",
    "Team",
    "Teams",
    "TeamsError",
    "is_team_name",
    "parse_teams",
    "read_teams",
    "team_topics",
]
