"""Pure rules for a job that reached its scheduling timeout: a timeout while training advanced is not the user's
failure. The run goes on as its next attempt, from its newest committed checkpoint, on the same machine shape, with
a timeout worked out from what the job measured, within the request's budget and deadline; the attempt says
`timeout-extended`. Only a job whose training did not advance (no checkpoint past the one it started from was
committed while it ran), or a run with no budget or deadline left, or one extended LANDFALL_TIMEOUT_EXTENSIONS times
already, ends FAILED `timeout`, saying which.

What the job measured comes from the checkpoints of the run's line (schemas/checkpoint_layout.py: `step-N/` with
its commit record written last), each with the time its commit record was written: the built-in trainer writes them,
a team's code that follows the layout too. Two or more committed while the job ran give the training rate between
them, and the start-up before the first; one gives a slower rate, counting from the job's start (start-up
included)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from functions.records.attempts import job_ended, request_deadline
from functions.records.run_rules import Step, transitioned
from schemas.money import usd_text
from schemas.record_bounds import cut
from schemas.run_record import RunError, RunRecord, RunState, TimeoutExtension
from schemas.times import format_timestamp
from schemas.vocabulary import TIMEOUT


@dataclass(frozen=True)
class Committed:
    """A committed checkpoint of the run's line: its step and when its commit record was written."""

    step: int
    written_at: datetime


@dataclass(frozen=True)
class ContinuationPolicy:
    max_extensions: int = 8
    """LANDFALL_TIMEOUT_EXTENSIONS: timeout extensions one run may have."""
    margin: float = 1.5
    """The next timeout is the measured time left x this, plus one start-up."""
    min_timeout_seconds: int = 600
    """Never a shorter timeout than this (a start-up alone may take minutes on a large machine)."""
    max_timeout_seconds: int = 7 * 86_400
    """Vertex's longest scheduling.timeout (schemas/data/vertex_jobs.json's default)."""


@dataclass(frozen=True)
class JobTimes:
    """The timed-out job's times, from Vertex."""

    created: datetime | None
    started: datetime | None
    ended: datetime | None


def _measured(committed: Sequence[Committed], times: JobTimes) -> tuple[int, int, float, float, str] | str:
    """(step it started from, newest step, steps per second, start-up seconds, how) from the checkpoints, or why
    the job did not advance."""
    if times.started is None:
        return "the job has no start time: it never ran"
    start = times.started
    before = [c.step for c in committed if c.written_at < start]
    origin = max(before, default=0)
    during = sorted((c for c in committed if c.written_at >= start and c.step > origin), key=lambda c: c.step)
    if not during:
        return (
            f"its training did not advance: no checkpoint past step {origin} was committed after the job started at "
            f"{format_timestamp(start)}"
        )
    first, last = during[0], during[-1]
    provisioning = max(0.0, (start - times.created).total_seconds()) if times.created is not None else 0.0
    span = (last.written_at - first.written_at).total_seconds()
    if len(during) >= 2 and span > 0 and last.step > first.step:
        rate = (last.step - first.step) / span
        # training began about (first.step - origin) / rate before the first checkpoint
        startup = max(0.0, (first.written_at - start).total_seconds() - (first.step - origin) / rate)
        how = (
            f"steps {first.step}..{last.step} committed {span:.0f} s apart: {rate:.3g} steps/s, and "
            f"{provisioning + startup:.0f} s of start-up"
        )
        return origin, last.step, rate, provisioning + startup, how
    elapsed = max((last.written_at - start).total_seconds(), 1.0)
    rate = (last.step - origin) / elapsed
    how = (
        f"step {origin} to {last.step} in the {elapsed:.0f} s after the job started: {rate:.3g} steps/s (start-up "
        f"included), and {provisioning:.0f} s of provisioning"
    )
    return origin, last.step, rate, provisioning, how


def extension(
    run: RunRecord,
    job_name: str,
    committed: Sequence[Committed],
    times: JobTimes,
    *,
    now: datetime,
    policy: ContinuationPolicy,
) -> TimeoutExtension | str:
    """The extension for the run whose current job `job_name` reached its timeout, or why it gets none."""
    plan = run.plan
    if plan is None or run.vertex is None:
        return "the run records no plan or job to continue"
    prior = run.submission.extension
    number = (prior.number if prior is not None else 0) + 1
    if number > policy.max_extensions:
        return f"its timeout was extended {policy.max_extensions} times already (LANDFALL_TIMEOUT_EXTENSIONS)"
    measured = _measured(committed, times)
    if isinstance(measured, str):
        return measured
    _origin, step, rate, startup, how = measured
    ran = (times.ended - times.started).total_seconds() if times.ended and times.started else 0.0
    spent = (prior.spent_usd if prior is not None else 0.0) + plan.hourly_cost_usd * max(ran, 0.0) / 3600.0
    left_steps = plan.estimated_steps - step
    if left_steps > 0:
        needed = left_steps / rate
        what = f"{left_steps} of the plan's {plan.estimated_steps} steps left after step {step}"
    else:  # the plan counted fewer steps than the training takes: as long again as this job trained
        needed = max(ran - startup, 0.0)
        what = f"past the plan's {plan.estimated_steps} steps at step {step}: as long again as the job trained"
    seconds = max(needed * policy.margin + startup, float(policy.min_timeout_seconds))
    why = [f"{what}, at the measured {how}: {needed:.0f} s x {policy.margin:g} + the start-up"]
    if seconds == policy.min_timeout_seconds:
        why.append(f"at least {policy.min_timeout_seconds} s")
    budget = float(run.request.get("constraints", {}).get("budget_usd") or 0.0)
    if budget > 0 and plan.hourly_cost_usd > 0:
        pays = (budget - spent) / plan.hourly_cost_usd * 3600.0
        if pays < startup + 60.0:
            return (
                f"no budget left to go on: the timed-out jobs cost {usd_text(spent)} of the "
                f"{usd_text(budget)} constraints.budget_usd"
            )
        if pays < seconds:
            seconds = pays
            why.append(f"capped at what the {usd_text(budget - spent)} left of the budget pays")
    deadline, written = request_deadline(run)
    if deadline is not None:
        until = (deadline - now).total_seconds()
        if until < startup + 60.0:
            return f"no time left before the request's constraints.deadline {written}"
        if until < seconds:
            seconds = until
            why.append(f"capped at the request's constraints.deadline {written}")
    if seconds > policy.max_timeout_seconds:
        seconds = policy.max_timeout_seconds
        why.append(f"capped at Vertex's limit of {policy.max_timeout_seconds} s")
    timeout = math.ceil(seconds)
    basis = f"timeout {timeout} s: " + "; ".join(why)
    return TimeoutExtension(
        number=number,
        job_name=job_name,
        region=run.vertex.region,
        machine_type=plan.machine_type,
        timeout_seconds=timeout,
        from_step=step,
        steps_per_second=round(rate, 6),
        spent_usd=round(spent, 6),
        at=format_timestamp(now),
        basis=cut(basis),
    )


def timeout_extended(job_name: str, granted: TimeoutExtension, message: str, *, now: datetime) -> Step[str]:
    """The run's current job reached its timeout while training advanced: record the job (its events are an earlier
    attempt's from now on) and the extension, and put the run back in SUBMITTING (outcome "resubmit"). "stale" when
    the job is not the run's current one (an old or repeated event)."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, str]:
        if cur is None or cur.vertex is None or cur.vertex.job_name != job_name or cur.state.terminal:
            return None, "stale"
        ended = job_ended(cur, TIMEOUT, message, now)
        recorded = replace(ended, submission=replace(ended.submission, extension=granted))
        new = transitioned(
            cur,
            RunState.SUBMITTING,
            now=now,
            detail=(
                f"timeout extended ({granted.number}): job {job_name} reached its timeout at step {granted.from_step}, "
                f"training advancing; the next job goes on from that checkpoint with a {granted.timeout_seconds} s "
                "timeout"
            ),
            change=lambda r: recorded,
        )
        return new, "resubmit" if new is not None else "stale"

    return step


def not_extended(error: RunError, why: str) -> RunError:
    """The timeout's error, saying why the run was not continued."""
    return replace(error, message=cut(f"{error.message} Not continued: {why}."))


__all__ = ["Committed", "ContinuationPolicy", "JobTimes", "extension", "not_extended", "timeout_extended"]
