"""Pure rules for a run's attempts: which plans are left to try, and what a capacity failure after acceptance
does to the run (resubmit on the next plan, wait, or give up). Applied as run_rules steps, so in one transaction.

A round is one pass over the run's stored plans (the first plan, then its fallbacks). A job that ends for capacity
is recorded on `submission.jobs` with the round it belonged to; the next attempt skips the plans that failed in
this round. When none is left, or the round has used `max_job_attempts` jobs, the run WAITS; when the wait is
over, the reconciler starts the next round (every plan again), backing off each time, until the request's
deadline or the give-up time, when the run FAILS naming its attempts.

A round that ends in WAITING is counted in `submission.refusals`, and only the last attempts and jobs are kept in
full (functions/records/bounds.py): a run that waits for days stays far below Firestore's 1 MiB document.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from functions.records.bounds import round_ended, round_line
from functions.records.run_rules import Step, transitioned
from schemas.plan import Plan
from schemas.record_bounds import REASON_KEPT, cut
from schemas.run_record import AttemptKind, JobAttempt, RunError, RunRecord, RunState, SubmissionAttempt, Waiting
from schemas.times import format_timestamp, parse_timestamp, parse_timestamp_or_none
from schemas.vocabulary import STOCKOUT, TIMEOUT, TIMEOUT_EXTENDED

MAX_BACKOFF = timedelta(hours=1)


@dataclass(frozen=True)
class AttemptPolicy:
    max_job_attempts: int = 3
    backoff_seconds: int = 60
    give_up_seconds: int = 86_400


def all_plans(run: RunRecord) -> list[Plan]:
    """The run's stored plans in order: the first one planned, then the fallbacks (each shape once: its region,
    machine type and GPUs; n1-standard-4 with a T4 and with a P4 are two shapes, refused for different quotas)."""
    first = run.submission.attempts[0].plan if run.submission.attempts else run.plan
    plans = [p for p in (first, *(run.submission.fallbacks or ())) if p is not None]
    seen: set[tuple[str, str, str, int]] = set()
    out = []
    for plan in plans:
        shape = (plan.region, plan.machine_type, plan.accelerator_type or "", plan.accelerator_count)
        if shape not in seen:
            seen.add(shape)
            out.append(plan)
    return out


def _round(run: RunRecord) -> int:
    return run.submission.round or 0


def round_jobs(run: RunRecord) -> list[JobAttempt]:
    """This round's jobs that ended for capacity (a job that reached its timeout and was continued is not one:
    functions/records/continuation.py)."""
    return [j for j in run.submission.jobs or () if j.round == _round(run) and j.reason != TIMEOUT]


def candidates(run: RunRecord) -> list[Plan]:
    """The plans still worth trying this round: those no job of this round failed on for capacity (the same region,
    machine type and GPU: an n1-standard-4 with a T4 refused leaves it with a P4 to try); the shape whose job reached
    its timeout while training advanced with the timeout its extension worked out."""
    failed = round_jobs(run)

    def refused(p: Plan) -> bool:
        return any(
            (j.region, j.machine_type) == (p.region, p.machine_type)
            and (j.accelerator_type is None or j.accelerator_type == (p.accelerator_type or ""))
            for j in failed
        )

    return [extended(run, p) for p in all_plans(run) if not refused(p)]


def _extends(run: RunRecord, plan: Plan) -> bool:
    ext = run.submission.extension
    return ext is not None and (plan.region, plan.machine_type) == (ext.region, ext.machine_type)


def extended(run: RunRecord, plan: Plan) -> Plan:
    """The plan with the run's timeout extension (submission.extension) when it is for the plan's shape."""
    ext = run.submission.extension
    if ext is None or not _extends(run, plan):
        return plan
    return replace(plan, timeout_seconds=ext.timeout_seconds)


def attempt_reason(run: RunRecord, plan: Plan) -> str | None:
    """Why an attempt on plan is made beyond the plans in order: TIMEOUT_EXTENDED when it continues a job that reached
    its timeout (its extension is for this shape); None otherwise."""
    return TIMEOUT_EXTENDED if _extends(run, plan) else None


def known_jobs(run: RunRecord) -> set[str]:
    """Jobs of earlier attempts kept in full on the run (`submission.jobs`)."""
    return {j.job_name for j in run.submission.jobs or ()}


def is_earlier_job(run: RunRecord, job_name: str) -> bool:
    """An earlier attempt's job (named on `submission.jobs`, or its id on `submission.job_ids`, which keeps more of
    them): a recovering dispatcher must not adopt it."""
    return job_name in known_jobs(run) or job_name.rsplit("/", 1)[-1] in (run.submission.job_ids or ())


def with_attempts(
    attempts: Iterable[SubmissionAttempt], lease_until: str | None = None
) -> Callable[[RunRecord], RunRecord]:
    """The change recording every attempt so far (and, when given, the submission lease's new end)."""
    recorded = tuple(attempts)

    def change(r: RunRecord) -> RunRecord:
        until = r.submission.lease_until if lease_until is None else lease_until
        return replace(r, submission=replace(r.submission, attempts=recorded, lease_until=until))

    return change


JOB_MAKING_KINDS = (AttemptKind.CREATED, AttemptKind.PENDING)
"""Outcomes of an attempt that may have made the run's (long) job: created, or pending when a recovering dispatcher
adopted the job it made (a canary's attempt makes the canary's job, whose metrics are not the run's)."""


def with_resumed_from(run: RunRecord, step: int | None) -> RunRecord:
    """The run with `resumed_from_step` set on the attempt that created its current job: the newest attempt in the
    job's region that may have made it (JOB_MAKING_KINDS). Unchanged when the step is unknown, the run has no
    current job, or no attempt fits."""
    attempts = list(run.submission.attempts or ())
    if step is None or run.vertex is None:
        return run
    for i in reversed(range(len(attempts))):
        if attempts[i].region == run.vertex.region and attempts[i].result.kind in JOB_MAKING_KINDS:
            attempts[i] = replace(attempts[i], resumed_from_step=step)
            return replace(run, submission=replace(run.submission, attempts=tuple(attempts)))
    return run


def attempts_summary(run: RunRecord) -> str:
    jobs = run.submission.jobs or ()
    refused = [a for a in run.submission.attempts or () if a.result.kind == AttemptKind.CAPACITY]
    parts = [f"{j.job_name.rsplit('/', 1)[-1]} in {j.region} ({j.machine_type}) {j.reason} at {j.at}" for j in jobs]
    parts += [f"{a.region} ({a.machine_type}) at {a.at}: {a.outcome}" for a in refused]
    counted = run.submission.refusals
    if counted is not None and (counted.attempts_omitted or counted.jobs_omitted):
        reasons = ", ".join(f"{n} x {reason}" for reason, n in counted.by_reason.items())
        parts.insert(
            0,
            f"{counted.refused} refusals in {counted.rounds} rounds ({reasons}), the first at {counted.first_at}; "
            "the last ones",
        )
    return "; ".join(parts) or "no attempt"


def request_deadline(run: RunRecord) -> tuple[datetime | None, str]:
    """The run's request's constraints.deadline, as a time and as written (None, "" when it sets none)."""
    constraints = run.request.get("constraints")
    written = str((constraints.get("deadline") if isinstance(constraints, dict) else "") or "")
    return parse_timestamp_or_none(written), written


def _gave_up(run: RunRecord, now: datetime, policy: AttemptPolicy, since: str) -> str | None:
    """Why the run stops waiting, or None to wait on."""
    deadline, written = request_deadline(run)
    if deadline is not None and now >= deadline:
        return f"the request's deadline {written} has passed"
    if now - parse_timestamp(since, field="waiting.since") >= timedelta(seconds=policy.give_up_seconds):
        return f"it waited {policy.give_up_seconds} s for capacity (LANDFALL_WAIT_GIVE_UP_SECONDS)"
    return None


def gives_up(run: RunRecord, now: datetime, policy: AttemptPolicy) -> bool:
    """Whether a WAITING run has waited long enough (or its deadline passed): wait_over ends it FAILED."""
    wait = run.submission.waiting
    return wait is not None and _gave_up(run, now, policy, wait.since) is not None


def gave_up_error(run: RunRecord, stop: str) -> RunError:
    """The error of a run that stopped waiting for capacity: the reason of its last job (a run whose spot jobs were
    preempted on every plan ends `preempted`, with the trainer's line), else `stockout` (every plan refused at
    submission), and every attempt named."""
    last = (run.submission.jobs or ())[-1:]
    said = f" The last job: {last[0].message}." if last and last[0].message else ""
    return RunError(
        "no-capacity",
        f"no capacity for this run: {stop}.{said} Attempts: {attempts_summary(run)}",
        reason=last[0].reason if last else STOCKOUT,
    )


def waited(run: RunRecord, reason: str, *, now: datetime, policy: AttemptPolicy) -> RunRecord | None:
    """The run moved to WAITING (or FAILED when it has waited long enough). The round's refusals are counted and
    the oldest attempts left out (bounds.round_ended); its history entry names the round and refers to them."""
    prior = run.submission.waiting
    since = prior.since if prior else format_timestamp(now)
    tries = (prior.tries + 1) if prior else 1
    stop = _gave_up(run, now, policy, since)
    if stop is not None:
        error = gave_up_error(run, stop)
        return transitioned(
            run,
            RunState.FAILED,
            now=now,
            detail="gave up waiting for capacity",
            change=lambda r: replace(r, error=error),
        )
    # The doubling stops at MAX_BACKOFF: past some 35 rounds 2 ** tries seconds no longer fits a timedelta.
    delay = min(timedelta(seconds=policy.backoff_seconds * 2 ** min(tries - 1, 32)), MAX_BACKOFF)
    wait = Waiting(reason=cut(reason, REASON_KEPT), retry_at=format_timestamp(now + delay), since=since, tries=tries)
    ended = run if run.state == RunState.WAITING else round_ended(run)
    return transitioned(
        ended,
        RunState.WAITING,
        now=now,
        detail=f"waiting for capacity until {wait.retry_at}: {round_line(run)}",
        change=lambda r: replace(r, submission=replace(r.submission, waiting=wait)),
    )


def job_ended(run: RunRecord, reason: str, message: str, now: datetime) -> RunRecord:
    """The run with its current job recorded on `submission.jobs` (and its id on `job_ids`: its late events are an
    earlier attempt's) and no current job, its submission claim given back, for a next attempt."""
    assert run.vertex is not None
    stamp = format_timestamp(now)
    ended = JobAttempt(
        job_name=run.vertex.job_name,
        region=run.vertex.region,
        machine_type=run.plan.machine_type if run.plan else "",
        reason=reason,
        message=cut(message),
        at=stamp,
        round=_round(run),
        accelerator_type=(run.plan.accelerator_type or "") if run.plan else None,
    )
    return replace(
        run,
        vertex=None,
        submission=replace(
            run.submission,
            jobs=(*(run.submission.jobs or ()), ended),
            lease_until=stamp,
            owner="",
            job_ids=(*(run.submission.job_ids or ()), run.vertex.job_id),
        ),
    )


def job_spend(plan: Plan | None, started: str, ended: str) -> float:
    """What a job of the run cost: its running time (started to ended, RFC 3339) x its plan's hourly cost; 0 for a
    job that never started, or without a plan."""
    start, end = parse_timestamp_or_none(started), parse_timestamp_or_none(ended)
    if plan is None or start is None or end is None or end <= start:
        return 0.0
    return (end - start).total_seconds() / 3600.0 * plan.hourly_cost_usd


def capacity_ended(
    job_name: str, reason: str, message: str, *, now: datetime, policy: AttemptPolicy, spent_usd: float = 0.0
) -> Step[str]:
    """The run's current job ended for capacity: record it (and what it cost, `spent_usd`, in cost.earlier_usd), then
    SUBMITTING on the next plan (outcome "resubmit") or WAITING/FAILED. "stale" when the job is not the run's current
    one (an old or repeated event)."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, str]:
        if cur is None or cur.vertex is None or cur.vertex.job_name != job_name or cur.state.terminal:
            return None, "stale"
        recorded = job_ended(cur, reason, message, now)
        if spent_usd > 0:  # its running time is now an earlier job's cost, not the current job's time
            recorded = replace(
                recorded, cost=recorded.cost.with_earlier(spent_usd), timings=recorded.timings.next_job()
            )
        number = len(recorded.submission.jobs or ()) + 1
        if candidates(recorded) and len(round_jobs(recorded)) < policy.max_job_attempts:
            new = transitioned(
                cur,
                RunState.SUBMITTING,
                now=now,
                detail=f"attempt {number}: job {job_name} ended for {reason}; next plan",
                change=lambda r: recorded,
            )
            return new, "resubmit"
        new = waited(recorded, f"{reason} on every plan", now=now, policy=policy)
        return new, "failed" if new is not None and new.state == RunState.FAILED else "waiting"

    return step


def wait_over(*, now: datetime, policy: AttemptPolicy) -> Step[str]:
    """A WAITING run whose retry time has come starts the next round (SUBMITTING; outcome "resubmit"), or FAILS
    when it has waited long enough; "not-yet" before retry_at, "not-waiting" for any other state."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, str]:
        if cur is None or cur.state != RunState.WAITING or cur.submission.waiting is None:
            return None, "not-waiting"
        wait = cur.submission.waiting
        stop = _gave_up(cur, now, policy, wait.since)
        if stop is not None:
            error = gave_up_error(cur, stop)
            return transitioned(
                cur,
                RunState.FAILED,
                now=now,
                detail="gave up waiting for capacity",
                change=lambda r: replace(r, error=error),
            ), "failed"
        if now < parse_timestamp(wait.retry_at, field="waiting.retry_at"):
            return None, "not-yet"
        stamp = format_timestamp(now)
        new = transitioned(
            cur,
            RunState.SUBMITTING,
            now=now,
            detail=f"round {_round(cur) + 1} after waiting",
            change=lambda r: replace(
                r, submission=replace(r.submission, round=_round(r) + 1, lease_until=stamp, owner="")
            ),
        )
        return new, "resubmit"

    return step


__all__ = [
    "AttemptPolicy",
    "all_plans",
    "attempt_reason",
    "attempts_summary",
    "candidates",
    "capacity_ended",
    "extended",
    "gave_up_error",
    "gives_up",
    "is_earlier_job",
    "job_ended",
    "known_jobs",
    "request_deadline",
    "round_jobs",
    "wait_over",
    "waited",
    "with_attempts",
]
