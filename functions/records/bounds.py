"""Pure rules that keep a run record bounded however long it waits (the bounds: schemas/record_bounds.py).

History is cut on every write (`bounded_history`, from run_rules.transitioned). What a round of plans was refused is
counted when the round ends in WAITING (`round_ended`, from attempts.waited), in the same transaction that records
the wait, and only then are the oldest attempts and jobs left out: each refusal is counted once, in the round it
belonged to, and an attempt is never left out before it was counted (a round makes fewer attempts than are kept).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from schemas.plan import Plan
from schemas.record_bounds import (
    ALTERNATIVES_KEPT,
    ATTEMPTS_KEPT,
    HISTORY_HEAD,
    HISTORY_TAIL,
    JOB_IDS_KEPT,
    JOBS_KEPT,
    OTHER_REASONS,
    REASONS_KEPT,
)
from schemas.run_record import (
    AttemptKind,
    AttemptOutcome,
    JobAttempt,
    Refusals,
    RunRecord,
    StateChange,
    SubmissionAttempt,
)


def bounded_history(
    history: tuple[StateChange, ...], omitted: int | None
) -> tuple[tuple[StateChange, ...], int | None]:
    """The history with the entries between the first HISTORY_HEAD and the last HISTORY_TAIL left out, and how many
    were left out in all (None: none)."""
    extra = len(history) - HISTORY_HEAD - HISTORY_TAIL
    if extra <= 0:
        return history, omitted
    return (*history[:HISTORY_HEAD], *history[-HISTORY_TAIL:]), (omitted or 0) + extra


def stored_plan(plan: Plan) -> Plan:
    """A plan as the run keeps it: its ALTERNATIVES_KEPT best alternatives (`alternatives_considered` unchanged)."""
    if len(plan.alternatives) <= ALTERNATIVES_KEPT:
        return plan
    return replace(plan, alternatives=plan.alternatives[:ALTERNATIVES_KEPT])


def refusal_reason(outcome: AttemptOutcome) -> str:
    """The reason an attempt's outcome is counted under: "capacity: quota exhausted", "capacity: not offered",
    "not admitted: team-cap" (the team limit that kept the plan from being tried)."""
    if outcome.kind == AttemptKind.NOT_ADMITTED:
        return f"{outcome.kind.value}: {outcome.detail.partition(':')[0]}"
    if outcome.kind != AttemptKind.CAPACITY:
        return outcome.text.partition(":")[0]
    return "capacity: quota exhausted" if "quota exhausted" in outcome.detail else "capacity: not offered"


def _refused(attempt: SubmissionAttempt) -> bool:
    """A refusal the round counts: Vertex's for capacity, or the team's limits'."""
    return attempt.result.kind in (AttemptKind.CAPACITY, AttemptKind.NOT_ADMITTED)


def _job_line(job: JobAttempt) -> str:
    return f"job {job.job_name.rsplit('/', 1)[-1]} in {job.region} ({job.machine_type}) ended for {job.reason}"


def round_refusals(run: RunRecord) -> list[tuple[str, str, str]]:
    """The current round's refusals, oldest first, as (at, reason, text): its attempts refused for capacity or not
    admitted by its team's limits, and its jobs that ended for capacity."""
    number = run.submission.round or 0
    found = [
        (a.at, refusal_reason(a.result), f"{a.region} ({a.machine_type}): {a.outcome}")
        for a in run.submission.attempts or ()
        if a.round == number and _refused(a)
    ]
    found += [(j.at, f"job: {j.reason}", _job_line(j)) for j in run.submission.jobs or () if j.round == number]
    return sorted(found, key=lambda f: f[0])


def _counted(by_reason: dict[str, int], new: Counter[str]) -> dict[str, int]:
    counts = Counter(by_reason)
    for reason, n in new.items():
        key = reason if reason in counts or len(counts) < REASONS_KEPT else OTHER_REASONS
        counts[key] += n
    return dict(sorted(counts.items()))


def round_ended(run: RunRecord) -> RunRecord:
    """The run as its round of plans ends in WAITING: the round's refusals counted in `submission.refusals`, then
    the attempts, jobs and job ids past their bounds left out."""
    sub = run.submission
    found = round_refusals(run)
    prior = sub.refusals
    first = (found[0][0], found[0][2]) if found else ("", "")
    last = (found[-1][0], found[-1][2]) if found else ("", "")
    refusals = Refusals(
        rounds=(prior.rounds if prior else 0) + 1,
        refused=(prior.refused if prior else 0) + len(found),
        first_at=prior.first_at if prior and prior.first_at else first[0],
        first=prior.first if prior and prior.first_at else first[1],
        last_at=last[0] or (prior.last_at if prior else ""),
        last=last[1] if found else (prior.last if prior else ""),
        by_reason=_counted(prior.by_reason if prior else {}, Counter(f[1] for f in found)),
        attempts_omitted=prior.attempts_omitted if prior else 0,
        jobs_omitted=prior.jobs_omitted if prior else 0,
    )
    attempts = sub.attempts or ()
    if len(attempts) > ATTEMPTS_KEPT + 1:
        left_out = len(attempts) - ATTEMPTS_KEPT - 1
        attempts = (attempts[0], *attempts[-ATTEMPTS_KEPT:])
        refusals = replace(refusals, attempts_omitted=refusals.attempts_omitted + left_out)
    jobs = sub.jobs or ()
    if len(jobs) > JOBS_KEPT:
        refusals = replace(refusals, jobs_omitted=refusals.jobs_omitted + len(jobs) - JOBS_KEPT)
        jobs = jobs[-JOBS_KEPT:]
    job_ids = sub.job_ids if sub.job_ids is None else sub.job_ids[-JOB_IDS_KEPT:]
    return replace(
        run,
        submission=replace(
            sub,
            refusals=refusals,
            attempts=attempts if sub.attempts is not None else None,
            jobs=jobs if sub.jobs is not None else None,
            job_ids=job_ids,
        ),
    )


def round_line(run: RunRecord) -> str:
    """What the current round was refused, counted, for its history entry (the texts are on its attempts)."""
    found = round_refusals(run)
    counts = Counter(f[1] for f in found)
    said = ", ".join(f"{n} x {reason}" for reason, n in sorted(counts.items())) or "no refusal recorded"
    return f"round {run.submission.round or 0}: {said} (submission.attempts, submission.refusals)"


__all__ = [
    "bounded_history",
    "refusal_reason",
    "round_ended",
    "round_line",
    "round_refusals",
    "stored_plan",
]
