"""TeamLedger: one document per team in the Firestore collection `teams` (topology firestore.teams_collection), keyed
by the team's name; and RunCharge, what one run holds against its team (the run record's `team`).

The dispatcher writes both in the transaction that claims a run's submission (functions/gcp/team_ledger_store.py):
the run's estimated cost is reserved for the month and its GPUs counted in flight; when the run ends, or waits for
capacity, the same kind of transaction settles it (actual cost instead of the estimate, GPUs released), once: the
run's charge says whether it is still held. Rules in functions/records/team_ledger.py; docs/teams.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader

SCHEMA_VERSION = 1
MONTHS_KEPT = 13
"""A ledger keeps the spend of this many calendar months (the newest), so the document stays small."""


@dataclass(frozen=True)
class MonthSpend:
    """A team's spend in one calendar month (UTC) of runs reserved in it."""

    reserved_usd: float = 0.0
    """Estimates of runs in flight (reserved at submission, not settled yet)."""
    settled_usd: float = 0.0
    """Actual costs of runs settled (ended, or waiting again for capacity)."""
    runs: int = 0
    """Runs reserved this month."""

    @property
    def total_usd(self) -> float:
        return self.reserved_usd + self.settled_usd

    def to_dict(self) -> dict[str, Any]:
        return {"reserved_usd": self.reserved_usd, "settled_usd": self.settled_usd, "runs": self.runs}


@dataclass(frozen=True)
class TeamLedger:
    team: str
    gpus: dict[str, int] = field(default_factory=dict)
    """GPUs in flight per Vertex accelerator type (kinds at 0 are left out)."""
    months: dict[str, MonthSpend] = field(default_factory=dict)
    """"YYYY-MM" -> spend; the newest MONTHS_KEPT."""
    updated_at: str = ""
    schema_version: int = SCHEMA_VERSION

    @property
    def gpus_total(self) -> int:
        return sum(self.gpus.values())

    def month(self, month: str) -> MonthSpend:
        return self.months.get(month, MonthSpend())

    def to_document(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "team": self.team,
            "gpus": dict(self.gpus),
            "months": {m: s.to_dict() for m, s in self.months.items()},
            "updated_at": self.updated_at,
        }


def _non_negative(r: Reader, key: str) -> float:
    return r.number(key, 0.0, minimum=0.0) if r.data.get(key) is not None else 0.0


def parse_team_ledger(data: object) -> TeamLedger:
    """A stored ledger document; raises SchemaError naming the field that does not fit."""
    r = Reader(data, "team_ledger")
    gpus = r.obj("gpus", {})
    months = r.obj("months", {})
    spend: dict[str, MonthSpend] = {}
    for key in months.data:
        m = months.obj(key)
        spend[str(key)] = MonthSpend(
            reserved_usd=_non_negative(m, "reserved_usd"),
            settled_usd=_non_negative(m, "settled_usd"),
            runs=m.integer("runs", 0, minimum=0),
        )
    return TeamLedger(
        team=r.string("team"),
        gpus={str(k): gpus.integer(k, minimum=0) for k in gpus.data},
        months=spend,
        updated_at=r.string("updated_at", "", max_len=64),
        schema_version=r.integer("schema_version", SCHEMA_VERSION),
    )


@dataclass(frozen=True)
class RunCharge:
    """What a run holds against its team (run record field `team`)."""

    name: str
    """The team."""
    via: str = "route"
    """How the request named it: "route" (its dataset's prefix) or "topic" (the team's own requests topic)."""
    held: bool = False
    """True while the run's estimate is reserved and its GPUs counted in flight; False before and once settled."""
    month: str = ""
    """The month ("YYYY-MM") its estimate was reserved in; settled there."""
    gpus: dict[str, int] = field(default_factory=dict)
    """GPUs counted in flight per kind while held."""
    reserved_usd: float = 0.0
    settled_usd: float = 0.0
    """What settling added to the month so far (every settled round of the run together)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "via": self.via,
            "held": self.held,
            "month": self.month,
            "gpus": dict(self.gpus),
            "reserved_usd": self.reserved_usd,
            "settled_usd": self.settled_usd,
        }


VIAS = ("route", "topic")


def parse_run_charge(data: object, path: str = "run.team") -> RunCharge:
    r = Reader(data, path)
    gpus = r.obj("gpus", {})
    via = r.string("via", "route")
    if via not in VIAS:
        raise SchemaError(f"{via!r} is not one of {', '.join(VIAS)}", field=f"{path}.via")
    return RunCharge(
        name=r.string("name"),
        via=via,
        held=r.boolean("held", False),
        month=r.string("month", "", max_len=16),
        gpus={str(k): gpus.integer(k, minimum=0) for k in gpus.data},
        reserved_usd=_non_negative(r, "reserved_usd"),
        settled_usd=_non_negative(r, "settled_usd"),
    )


__all__ = [
    "MONTHS_KEPT",
    "SCHEMA_VERSION",
    "VIAS",
    "MonthSpend",
    "RunCharge",
    "TeamLedger",
    "parse_run_charge",
    "parse_team_ledger",
]
