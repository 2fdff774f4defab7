"""In-memory stand-ins for the team ledger store and the settling runs store (functions/gcp/team_ledger_store.py):
the ledger documents beside a FakeRuns' run documents, changed under the same lock, so a pair step is as atomic as
Firestore's transaction over both."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from deploy.teams import Teams, parse_teams
from functions.records.run_rules import Step
from functions.records.team_ledger import settle_step, settles
from schemas.run_record import RunRecord, RunState, parse_run_record
from schemas.team_ledger import TeamLedger, parse_team_ledger
from tests.fakes.documents import copy_document
from tests.fakes.runs import FakeRuns

T = TypeVar("T")


def churn_team(gpu_cap: str) -> Teams:
    """One team, churn, owning gs://landfall-landing/datasets/ (the fake world's requests), a $1,000 monthly budget,
    and `gpu_cap`, the body of its [teams.gpu_cap] table (e.g. "all = 2")."""
    return parse_teams(
        tomllib.loads(
            "[[teams]]\n"
            'name = "churn"\n'
            'owns = [{bucket = "landfall-landing", prefix = "datasets/"}]\n'
            "monthly_budget_usd = 1000\n"
            f"[teams.gpu_cap]\n{gpu_cap}\n"
        )
    )


def numbered_request(n: int, tag: str) -> bytes:
    """The fake world's request, its own run: idempotency key suffixed with tag and n."""
    from tests.fakes.world import REQUEST_JSON

    raw = json.loads(REQUEST_JSON)
    raw["idempotency_key"] = f"{raw['idempotency_key']}-{tag}-{n}"
    return json.dumps(raw).encode()


class FakeLedger:
    def __init__(self, runs: FakeRuns, now: Callable[[], datetime]) -> None:
        self.runs = runs
        self.docs: dict[str, dict[str, object]] = {}
        self.now = now
        self.waker: Callable[[str], int] | None = None
        """As TeamLedgerStore.waker: called with the team after a settle."""

    def apply(
        self,
        run_id: str,
        team: str,
        step: Callable[[RunRecord | None, TeamLedger | None], tuple[RunRecord | None, TeamLedger | None, T]],
    ) -> T:
        """As the store's transaction."""
        return self._apply_pair(run_id, team, step)

    def _apply_pair(
        self,
        run_id: str,
        team: str,
        step: Callable[[RunRecord | None, TeamLedger | None], tuple[RunRecord | None, TeamLedger | None, T]],
    ) -> T:
        with self.runs._lock:
            run_doc, team_doc = self.runs.docs.get(run_id), self.docs.get(team)
            new_run, new_ledger, result = step(
                None if run_doc is None else parse_run_record(copy_document(run_doc)),
                None if team_doc is None else parse_team_ledger(copy_document(team_doc)),
            )
            if new_run is not None:
                self.runs.docs[run_id] = new_run.to_document()
            if new_ledger is not None:
                self.docs[team] = new_ledger.to_document()
            return result

    def ledger(self, team: str) -> TeamLedger | None:
        doc = self.docs.get(team)
        return None if doc is None else parse_team_ledger(copy_document(doc))

    def settle(self, run: RunRecord, now: datetime) -> bool:
        done = False if run.team is None else self.apply(run.run_id, run.team.name, settle_step(now=now))
        if done and run.team is not None and self.waker is not None:
            self.waker(run.team.name)
        return done

    def waiting_of(self, team: str, limit: int) -> list[RunRecord]:
        """The team's runs WAITING, longest waiting first (the Firestore store's query)."""
        runs = [parse_run_record(copy_document(d)) for d in list(self.runs.docs.values())]
        waiting = [r for r in runs if r.state == RunState.WAITING and r.team is not None and r.team.name == team]
        return sorted(waiting, key=lambda r: r.submission.waiting.since if r.submission.waiting else "")[:limit]

    def held_to_settle(self) -> list[RunRecord]:
        runs = [parse_run_record(copy_document(d)) for d in list(self.runs.docs.values())]
        return [r for r in runs if settles(r)]


class FakeSettlingRuns(FakeRuns):
    """FakeRuns that settles a run's team reservation after a write that ends it or makes it wait."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger: FakeLedger | None = None
        self.fail_settle = False
        """True: the settle after a write fails (as Firestore might), leaving it to the reconciler."""

    def apply(self, run_id: str, step: Step[T]) -> T:
        written: list[RunRecord] = []

        def capturing(cur: RunRecord | None) -> tuple[RunRecord | None, T]:
            new, result = step(cur)
            written[:] = [] if new is None else [new]
            return new, result

        result = super().apply(run_id, capturing)
        if written and settles(written[0]) and self.ledger is not None and not self.fail_settle:
            self.ledger.settle(written[0], self.ledger.now())
        return result
