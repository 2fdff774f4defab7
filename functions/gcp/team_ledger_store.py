"""Firestore adapter for the team ledger (schemas/team_ledger.py): one document per team in the teams collection,
changed only together with a run's own document, both read and written in one transaction. Two deliveries claiming
runs of one team therefore serialize on the team's document (Firestore's optimistic transactions: the later commit
is aborted and tried again on the fresh ledger), so no two can both pass a cap they only fit one at a time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, TypeVar

from functions.errors import LandfallError, as_transient
from functions.gcp.firestore_tx import retried, write_successor
from functions.gcp.runs_store import RunsStore
from functions.records.run_rules import Step
from functions.records.team_ledger import settle_step, settles
from schemas.run_record import RunRecord, parse_run_record
from schemas.team_ledger import TeamLedger, parse_team_ledger

T = TypeVar("T")
log = logging.getLogger("landfall.teams")

PairStep = Callable[[RunRecord | None, TeamLedger | None], tuple[RunRecord | None, TeamLedger | None, T]]
"""Given the run and its team's ledger as stored (None when absent): the run and the ledger to write (None: leave it
as it is) and the operation's result."""


class TeamLedgerStore:
    def __init__(
        self, client: Any, runs_collection: str, teams_collection: str, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self._client = client
        self._runs = runs_collection
        self._teams = teams_collection
        self._sleep = sleep

    def ledgers(self, names: Iterable[str]) -> dict[str, TeamLedger]:
        """The stored ledgers of the named teams, by name (a team with none yet is left out)."""
        refs = [self._client.collection(self._teams).document(n) for n in dict.fromkeys(names)]
        if not refs:
            return {}
        try:
            snapshots = list(self._client.get_all(refs))
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return {s.id: parse_team_ledger(s.to_dict()) for s in snapshots if s.exists}

    def apply(self, run_id: str, team: str, step: PairStep[T]) -> T:
        """Run step on the run's and its team's documents in one transaction; write what it returns."""
        from google.cloud import firestore

        run_ref = self._client.collection(self._runs).document(run_id)
        team_ref = self._client.collection(self._teams).document(team)

        @firestore.transactional
        def body(transaction: Any) -> T:
            snapshots = {s.reference.path: s for s in transaction.get_all([run_ref, team_ref])}
            run_snap, team_snap = snapshots.get(run_ref.path), snapshots.get(team_ref.path)
            run_doc = run_snap.to_dict() if run_snap is not None and run_snap.exists else None
            team_doc = team_snap.to_dict() if team_snap is not None and team_snap.exists else None
            new_run, new_ledger, result = step(
                None if run_doc is None else parse_run_record(run_doc),
                None if team_doc is None else parse_team_ledger(team_doc),
            )
            write_successor(transaction, run_ref, run_doc, None if new_run is None else new_run.to_document())
            write_successor(transaction, team_ref, team_doc, None if new_ledger is None else new_ledger.to_document())
            return result

        run: Callable[[Any], T] = body  # firestore.transactional is unannotated
        return retried(self._client, run, f"{run_ref.path} and {team_ref.path}", sleep=self._sleep)

    def held_to_settle(self, *, limit: int = 500) -> list[RunRecord]:
        """Runs still holding a reservation although they ended or wait (a settle that failed after the run's own
        write): the reconciler settles them."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        try:
            query = self._client.collection(self._runs).where(filter=FieldFilter("team.held", "==", True))
            docs = [d.to_dict() for d in query.limit(limit).stream()]
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return [run for run in (parse_run_record(d) for d in docs) if settles(run)]

    def settle(self, run: RunRecord, now: datetime) -> bool:
        """Settle the run's held reservation (if still held, read again in the transaction); True when this call did."""
        if run.team is None:
            return False
        return self.apply(run.run_id, run.team.name, settle_step(now=now))


class SettlingRunsStore(RunsStore):
    """The runs store of the functions when teams are configured: any write that ends a run holding a reservation,
    or makes it wait, settles the reservation in the team's ledger right after, in a transaction of its own. Should
    that fail, the run's charge stays held and the reconciler's pass settles it (TeamLedgerStore.held_to_settle):
    the held flag, read in each settling transaction, makes it happen once."""

    def __init__(
        self, client: Any, collection: str, ledger: TeamLedgerStore, now: Callable[[], datetime] | None = None
    ) -> None:
        super().__init__(client, collection)
        self.ledger = ledger
        self._now = now or (lambda: datetime.now(UTC))

    def apply(self, run_id: str, step: Step[T]) -> T:
        written: list[RunRecord] = []

        def capturing(cur: RunRecord | None) -> tuple[RunRecord | None, T]:
            new, result = step(cur)
            written[:] = [] if new is None else [new]
            return new, result

        result = super().apply(run_id, capturing)
        if written and settles(written[0]):
            self.forget(run_id)  # the settle's transaction writes the run too
            try:
                self.ledger.settle(written[0], self._now())
            except LandfallError as exc:
                log.warning("run %s: its team reservation is settled by the next reconcile pass (%s)", run_id, exc)
        return result


__all__ = ["PairStep", "SettlingRunsStore", "TeamLedgerStore"]
