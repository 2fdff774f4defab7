"""Firestore adapter for the team ledger (schemas/team_ledger.py): one document per team in the teams collection,
changed only together with a run's own document, both read and written atomically. Two deliveries claiming runs of
one team therefore serialize on the team's document (Firestore's optimistic concurrency: the later write is refused
and tried again on the fresh ledger), so no two can both pass a cap they only fit one at a time.

Atomically means a transaction (begin, read both, commit), or, for the dispatcher's claim of a run the unit of work
has just seen (functions/gcp/unit_of_work.py, shared with the runs store), one Commit of both documents, each
conditional on the version the step saw (the run as last written or read, the ledger as read): the same guarantee in
two calls instead of three, with the submission slot riding in the same Commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, TypeVar

from functions.errors import LandfallError, TransientError, as_transient
from functions.gcp.firestore_reads import get_document
from functions.gcp.firestore_tx import changed_paths
from functions.gcp.runs_store import RunsStore
from functions.gcp.unit_of_work import Seen, UnitOfWork
from functions.records.run_rules import Step
from functions.records.team_ledger import settle_step, settles
from functions.records.team_wakes import waits_for_team, writes_ledger
from schemas.run_record import RunRecord, RunState, parse_run_record
from schemas.team_ledger import TeamLedger, parse_team_ledger

T = TypeVar("T")
log = logging.getLogger("landfall.teams")

BUSY_SECONDS = 60.0
"""How long after a claim of a team went WAITING its claims are first tried on a plain-read ledger."""

PairStep = Callable[[RunRecord | None, TeamLedger | None], tuple[RunRecord | None, TeamLedger | None, T]]
"""Given the run and its team's ledger as stored (None when absent): the run and the ledger to write (None: leave it
as it is) and the operation's result."""


class TeamLedgerStore:
    def __init__(
        self,
        client: Any,
        runs_collection: str,
        teams_collection: str,
        *,
        work: UnitOfWork | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`work`: the unit of work shared with the runs store (None: one of its own)."""
        self._client = client
        self.work = work if work is not None else UnitOfWork(client, runs_collection)
        self._runs = runs_collection
        self._teams = teams_collection
        self._sleep = sleep
        self.waker: Callable[[str], int] | None = None
        """Wakes a team's waiting runs that fit (functions/records/team_wakes.py TeamWaker.wake); set by the
        wiring. None: waiting runs are retried by the reconciler only."""
        self.waits_on_read = 0
        """Claims this store sent WAITING on a plain-read ledger (neither read nor written in their transaction)."""
        self._turns: dict[str, threading.Lock] = {}
        self._turns_lock = threading.Lock()
        self._waited_at: dict[str, float] = {}
        """Per team: when a claim here last went WAITING (time.monotonic): for BUSY_SECONDS after, its claims are
        tried on a plain-read ledger first."""

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

    def ledger_of(self, team: str) -> TeamLedger | None:
        """The team's stored ledger, plain-read (None: none yet)."""
        return self.ledgers([team]).get(team)

    def waiting_of(self, team: str, limit: int) -> list[RunRecord]:
        """Up to `limit` of the team's runs WAITING, longest waiting first (the composite index state, team.name,
        submission.waiting.since in deploy/firestore.indexes.json)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        try:
            query = (
                self._client.collection(self._runs)
                .where(filter=FieldFilter("state", "==", RunState.WAITING.value))
                .where(filter=FieldFilter("team.name", "==", team))
                .order_by("submission.waiting.since")
                .limit(limit)
            )
            docs = [d.to_dict() for d in query.stream()]
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return [parse_run_record(d) for d in docs]

    def apply(self, run_id: str, team: str, step: PairStep[T]) -> T:
        """Run step on the run's and its team's documents atomically; write what it returns.

        A run the unit of work has seen moments ago (the dispatcher's claim, right after it created or read the run)
        is first tried without a transaction, on that copy and the ledger as read now: the unit of work commits both
        in one Commit, each on the condition that it is still the version the step saw, with the submission slot the
        claim wants. A claim that waits writes the run alone in that Commit, as a wait on a plain-read ledger does
        (below: the ledger read again after). Anything else, or a Commit refused because either changed, is decided
        in a transaction.

        While the team's claims here go WAITING (one did within BUSY_SECONDS: its cap or budget binds), a claim is
        first tried against a plain read of the ledger, in a transaction over the run alone: a run that the ledger
        as read already puts over the limit WAITS without the ledger being read or written in its transaction, so
        a burst of one team's claims no longer collides on the team's document (docs/teams.md). Only a step that
        would write the ledger (a run that fits, a settle) runs in the transaction over both; the ledger is never
        written from a plain read, so the caps hold. A settle between the plain read and the WAITING write would
        find this run not yet waiting and not wake it: the ledger is read again after the write, and if it changed
        meanwhile, the team's waiting runs are woken from here (self.waker)."""
        busy = self._busy(team)
        seen = self.work.seen(run_id)
        if seen is not None:
            if busy:  # most claims wait: they need not take turns (one that fits and collides goes below)
                done = self._commit_on_seen(run_id, team, step, seen)
            else:
                with self._turn(team):
                    done = self._commit_on_seen(run_id, team, step, seen)
            if done is not None:
                return done[0]
        if busy:
            done = self._on_plain_ledger(run_id, team, step)
            if done is not None:
                return done[0]
            # It would write the ledger: the instance's transactions on one team's ledger take turns (a lock per
            # team), and each looks again first, so the deliveries that all saw the one free GPU do not all open
            # transactions on the ledger at once (on the emulator such a pile-up queues on its locks until they time
            # out); the look after the turn sends the losers to WAITING on the ledger as the winner left it.
            with self._turn(team):
                done = self._on_plain_ledger(run_id, team, step)
                if done is None:
                    done = self._transaction(run_id, team, step, plain=None)
                assert done is not None, "a transaction over both documents always decides"
                return done[0]
        with self._turn(team):
            done = self._transaction(run_id, team, step, plain=None)
            assert done is not None, "a transaction over both documents always decides"
            return done[0]

    def _turn(self, team: str) -> threading.Lock:
        with self._turns_lock:
            return self._turns.setdefault(team, threading.Lock())

    def _busy(self, team: str) -> bool:
        """A claim of the team went WAITING (its cap or budget binds), or a transaction on its ledger kept colliding,
        on this instance within BUSY_SECONDS."""
        at = self._waited_at.get(team)
        return at is not None and time.monotonic() - at < BUSY_SECONDS

    def _on_plain_ledger(self, run_id: str, team: str, step: PairStep[T]) -> tuple[T] | None:
        """step over the run (in a transaction) and the ledger as plain-read; (result,) when it wrote no ledger,
        None (nothing written) when it would: then it is to run in the transaction over both. A first look at both
        documents as plain-read sends a run that fits straight to that transaction."""
        run_ref = self._client.collection(self._runs).document(run_id)
        team_ref = self._client.collection(self._teams).document(team)
        try:
            seen = {s.reference.path: s for s in self._client.get_all([run_ref, team_ref])}
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        run_seen, team_seen = seen.get(run_ref.path), seen.get(team_ref.path)
        before = parse_team_ledger(team_seen.to_dict()) if team_seen is not None and team_seen.exists else None
        seen_run = parse_run_record(run_seen.to_dict()) if run_seen is not None and run_seen.exists else None
        if writes_ledger(step, seen_run, before):
            return None
        return self._transaction(run_id, team, step, plain=(before,))

    def _commit_on_seen(self, run_id: str, team: str, step: PairStep[T], seen: Seen) -> tuple[T] | None:
        """step on the seen run and the ledger as read now, committed by the unit of work in one Commit with
        preconditions (their update times; the ledger's absence when it has none); (result,) once committed, None
        when the step writes neither both nor a wait, or the Commit was refused because either changed (nothing
        written then)."""
        from functions.gcp import firestore_writes

        team_ref = self._client.collection(self._teams).document(team)
        try:
            team_doc, team_at = get_document(self._client, team_ref)
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        before = None if team_doc is None else parse_team_ledger(team_doc)
        new_run, new_ledger, result = step(seen.run(), before)
        if new_run is None:
            return None
        waits = new_ledger is None and waits_for_team(new_run)
        if new_ledger is None and not waits:
            return None
        also: list[Any] = []
        if new_ledger is not None:
            ledger_doc = new_ledger.to_document()
            if team_doc is None:
                also.append(firestore_writes.create_write(team_ref, ledger_doc))
            else:
                ledger_paths = changed_paths(team_doc, ledger_doc)
                if not ledger_paths:
                    return None
                also.append(firestore_writes.update_write(team_ref, ledger_paths, team_at))
        if self.work.commit(run_id, seen, new_run, result, also) is None:
            return None
        if waits:
            self._waited_on_read(team, before)
        return (result,)

    def _waited_on_read(self, team: str, before: TeamLedger | None) -> None:
        """A run went WAITING on the ledger as plain-read (`before`): the team is busy, and its ledger read again."""
        self._waited_at[team] = time.monotonic()
        self.waits_on_read += 1
        self._recheck(team, before)

    def _recheck(self, team: str, before: TeamLedger | None) -> None:
        """After a run went WAITING on a plain-read ledger: wake the team's waiting runs if the ledger changed."""
        if self.waker is None:
            return
        try:
            after = self.ledger_of(team)
        except LandfallError as exc:
            log.warning("team %s: ledger not read again after a wait (the reconciler's pass wakes it): %s", team, exc)
            return
        if (after.updated_at if after else "") != (before.updated_at if before else ""):
            self.waker(team)

    def _transaction(
        self, run_id: str, team: str, step: PairStep[T], *, plain: tuple[TeamLedger | None] | None
    ) -> tuple[T] | None:
        """step in the unit of work's transaction over the run and the team's ledger, or, with `plain` (the ledger as
        plain-read), over the run alone: then None (nothing written) when the step would write the ledger; (result,)
        otherwise."""
        waits: list[bool] = []

        def over_both(run: RunRecord | None, doc: dict[str, Any] | None) -> tuple[RunRecord | None, Any, T] | None:
            ledger = plain[0] if plain is not None else None if doc is None else parse_team_ledger(doc)
            new_run, new_ledger, result = step(run, ledger)
            if plain is not None and new_ledger is not None:
                return None
            waits[:] = [new_ledger is None and new_run is not None and waits_for_team(new_run)]
            return new_run, None if new_ledger is None else new_ledger.to_document(), result

        other = None if plain is not None else self._client.collection(self._teams).document(team)
        try:
            done = self.work.transaction(run_id, over_both, other=other, sleep=self._sleep)
        except TransientError:
            if plain is None:
                # Claims of the team are colliding on its ledger: the next ones look at it plain-read first (a team
                # whose first claims of a burst all collided would otherwise never see one wait, and go on colliding).
                self._waited_at[team] = time.monotonic()
            raise
        if done is not None and waits and waits[0]:
            if plain is not None:
                self._waited_on_read(team, plain[0])
            else:
                self._waited_at[team] = time.monotonic()
        return done

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
        done = self.apply(run.run_id, run.team.name, settle_step(now=now))
        if done:
            self.wake(run.team.name)
        return done

    def wake(self, team: str) -> None:
        """Wake the team's waiting runs that fit now (functions/records/team_wakes.py), if a waker is set."""
        if self.waker is not None:
            self.waker(team)


class SettlingRunsStore(RunsStore):
    """The runs store of the functions when teams are configured: any write that ends a run holding a reservation,
    or makes it wait, settles the reservation in the team's ledger right after, in a transaction of its own. Should
    that fail, the run's charge stays held and the reconciler's pass settles it (TeamLedgerStore.held_to_settle):
    the held flag, read in each settling transaction, makes it happen once."""

    def __init__(
        self, client: Any, collection: str, ledger: TeamLedgerStore, now: Callable[[], datetime] | None = None
    ) -> None:
        super().__init__(client, collection, ledger.work)
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
            self.work.forget(run_id)  # the settle's transaction writes the run too
            try:
                self.ledger.settle(written[0], self._now())  # and wakes the team's waiting runs that now fit
            except LandfallError as exc:
                log.warning("run %s: its team reservation is settled by the next reconcile pass (%s)", run_id, exc)
        return result


__all__ = ["PairStep", "SettlingRunsStore", "TeamLedgerStore"]
