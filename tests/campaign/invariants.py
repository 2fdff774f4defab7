"""The campaign's invariants over what a trial left behind (Firestore documents, Vertex jobs, the bridge's log).
Pure: the harness gathers the facts, these functions judge them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

INVARIANTS: dict[str, str] = {
    "one-run-per-version": "every accepted dataset version has exactly one run",
    "run-settles": "every run reaches a true terminal state or an explained waiting state",
    "one-job-per-attempt": "at most one Vertex job per run attempt, and every job is one its run knows",
    "no-endless-redelivery": "no message is redelivered forever (none dead-lettered, none still failing)",
}
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "REJECTED"})
TERMINAL_JOB_STATES = {
    "SUCCEEDED": {"JOB_STATE_SUCCEEDED"},
    "FAILED": {"JOB_STATE_FAILED", "JOB_STATE_EXPIRED", "JOB_STATE_PARTIALLY_SUCCEEDED"},
    "CANCELLED": {"JOB_STATE_CANCELLED"},
}


@dataclass(frozen=True)
class TrialFacts:
    """What one trial's dataset left: its dataset document, version documents, runs naming its URI, and the Vertex
    jobs labelled with each run id (name -> state)."""

    uri: str
    dataset: dict[str, Any] | None
    versions: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    jobs: dict[str, dict[str, str]] = field(default_factory=dict)
    """run id -> {job name: JobState name}"""


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str


def settled(facts: TrialFacts) -> bool:
    """The trial is quiet: its dataset was answered and every run it started has ended or waits with a reason."""
    if facts.dataset is None or facts.dataset.get("status") not in ("REQUESTED", "REFUSED", "DUPLICATE", "WAITING"):
        return False
    if facts.dataset.get("status") == "REQUESTED" and not facts.runs:
        return False
    return all(_run_problem(run) is None for run in facts.runs)


def _run_problem(run: dict[str, Any]) -> str | None:
    state = run.get("state")
    if state in TERMINAL:
        return None
    waiting = (run.get("submission") or {}).get("waiting") or {}
    if state == "WAITING" and waiting.get("reason") and waiting.get("retry_at"):
        return None
    return f"run {run.get('run_id')} is {state}" + (" with no waiting reason" if state == "WAITING" else "")


def check(facts: TrialFacts) -> list[Violation]:
    out: list[Violation] = []
    published = [v for v in facts.versions if v.get("status") == "PUBLISHED"]
    run_ids = {r.get("run_id") for r in facts.runs}
    if facts.dataset is None or facts.dataset.get("status") != "REQUESTED":
        status = None if facts.dataset is None else f"{facts.dataset.get('status')}: {facts.dataset.get('reason')}"
        out.append(Violation("one-run-per-version", f"{facts.uri}: the dataset was never requested ({status})"))
    for version in published:
        if version.get("run_id") not in run_ids:
            out.append(
                Violation(
                    "one-run-per-version",
                    f"{facts.uri}: published version {version.get('generation')} has no run {version.get('run_id')}",
                )
            )
    if len(facts.runs) != len(published):
        out.append(
            Violation(
                "one-run-per-version",
                f"{facts.uri}: {len(published)} published version(s) but "
                f"{len(facts.runs)} run(s): {sorted(map(str, run_ids))}",
            )
        )
    for run in facts.runs:
        problem = _run_problem(run)
        if problem:
            out.append(Violation("run-settles", f"{facts.uri}: {problem}"))
        out += _job_violations(run, facts.jobs.get(str(run.get("run_id")), {}))
    return out


def _job_violations(run: dict[str, Any], jobs: dict[str, str]) -> list[Violation]:
    run_id, submission = run.get("run_id"), run.get("submission") or {}
    known = {j.get("job_name") for j in submission.get("jobs") or ()}
    # A long wait keeps only its last jobs in full, and the ids of more (schemas/record_bounds.py).
    earlier_ids = set(submission.get("job_ids") or ())
    known |= {name for name in jobs if name.rsplit("/", 1)[-1] in earlier_ids}
    current = (run.get("vertex") or {}).get("job_name")
    if current:
        known.add(current)
    out = [
        Violation(
            "one-job-per-attempt",
            f"run {run_id}: Vertex job {name} ({state}) carries its label but the "
            f"run does not know it (it knows {sorted(known)})",
        )
        for name, state in sorted(jobs.items())
        if name not in known
    ]
    attempts = submission.get("attempts") or ()
    created = sum(1 for a in attempts if a.get("outcome") == "created")
    counted = submission.get("refusals") or {}
    created += int(counted.get("attempts_omitted") or 0)  # left out of the record: counted as if each made a job
    rounds_jobs = len(submission.get("jobs") or ()) + int(counted.get("jobs_omitted") or 0)
    if len(jobs) > max(created, 1) + rounds_jobs:
        out.append(
            Violation(
                "one-job-per-attempt",
                f"run {run_id}: {len(jobs)} labelled jobs for {created} "
                f"created attempt(s) and {rounds_jobs} earlier job(s)",
            )
        )
    state = run.get("state")
    if state in TERMINAL_JOB_STATES and current and jobs.get(current) not in TERMINAL_JOB_STATES[state]:
        out.append(
            Violation("run-settles", f"run {run_id} is {state} but its job {current} is {jobs.get(current, 'missing')}")
        )
    return out


DEAD_LETTERED = re.compile(r"(\S+): message (\S+) attempt (\d+) of (\d+) failed: (.*); dead-lettered")
FAILED = re.compile(r"(\S+): message (\S+) attempt (\d+) of (\d+) failed: (.*); next attempt in")


def delivery_violations(bridge_log: str) -> list[Violation]:
    """Messages the bridge dead-lettered in this stretch of its log."""
    return [
        Violation(
            "no-endless-redelivery",
            f"{m.group(1)}: message {m.group(2)} dead-lettered after {m.group(3)} attempts ({m.group(5)[:200]})",
        )
        for m in DEAD_LETTERED.finditer(bridge_log)
    ]


def failing_messages(bridge_log: str) -> dict[str, int]:
    """message id -> highest failed attempt in this stretch of the bridge's log."""
    out: dict[str, int] = {}
    for m in FAILED.finditer(bridge_log):
        out[m.group(2)] = max(out.get(m.group(2), 0), int(m.group(3)))
    return out
