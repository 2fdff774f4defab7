"""The campaign's invariants over what a trial left behind (Firestore documents, Vertex jobs, the bridge's log).
Pure: the harness gathers the facts, these functions judge them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

INVARIANTS: dict[str, str] = {
    "one-run-per-version": "every accepted dataset version has exactly one run",
    "run-settles": "every run reaches a true terminal state or an explained waiting state",
    "one-job-per-attempt": "at most one Vertex job per run attempt, and every job is one its run knows",
    "no-endless-redelivery": "no message is redelivered forever (none dead-lettered, none still failing)",
    "progress-kept": "a resume loses at most one checkpoint interval of the steps trained before it",
    "no-sample-twice": "what the final model trained on holds each sample once: every resume goes on from the "
    "sample after its checkpoint's, and a SUCCEEDED run's steps cover the data exactly",
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
    trainer_lines: dict[str, list[str]] = field(default_factory=dict)
    """run id -> the lines its jobs' primary replicas logged, job after job in the order they were created (a
    replica restarted in its job goes on in the same log)"""


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
        if str(run.get("run_id")) in facts.trainer_lines:
            out += training_violations(run, facts.trainer_lines[str(run.get("run_id"))])
    return out


def _records(lines: list[str], *messages: str) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("message") in messages:
                out.append(record)
    return out


def resumes(lines: list[str]) -> list[tuple[int, int]]:
    """(step resumed from, steps lost) of each attempt the checkpointing trainer started from a checkpoint (step > 0):
    the steps lost are those the attempt before it trained past that step."""
    from tests.campaign.checkpoint_trainer import START, STEP

    out, reached = [], 0
    for record in _records(lines, START, STEP):
        if record["message"] == STEP:
            reached = max(reached, int(record["step"]))
            continue
        step = int(record["resumed_from_step"])
        if step > 0:
            out.append((step, max(0, reached - step)))
        reached = 0
    return out


def training_violations(run: dict[str, Any], lines: list[str]) -> list[Violation]:
    """progress-kept and no-sample-twice over what the campaign's checkpointing trainer logged for a run
    (tests/campaign/checkpoint_trainer.py): `campaign start` with the step it resumed from, then each step's sample
    range. `kept` is what the model holds at each point: a resume from step C drops what was trained past C."""
    from tests.campaign.checkpoint_trainer import START, STEP

    run_id, out = run.get("run_id"), []
    kept: list[dict[str, Any]] = []
    reached = 0
    total: int | None = None
    for record in _records(lines, START, STEP):
        if record["message"] == START:
            resumed, total, every = int(record["resumed_from_step"]), int(record["steps"]), record["checkpoint_every"]
            if reached - resumed > every:
                out.append(
                    Violation(
                        "progress-kept",
                        f"run {run_id}: resumed from step {resumed} after training to step {reached}: "
                        f"{reached - resumed} steps lost, more than the {every} between checkpoints",
                    )
                )
            if resumed > (kept[-1]["step"] if kept else 0):
                out.append(
                    Violation("no-sample-twice", f"run {run_id}: resumed from step {resumed}, which was never trained")
                )
            kept = [k for k in kept if k["step"] <= resumed]
            continue
        previous_end = kept[-1]["end_sample"] if kept else 0
        expected_step = kept[-1]["step"] + 1 if kept else 1
        if record["step"] != expected_step or record["first_sample"] != previous_end:
            out.append(
                Violation(
                    "no-sample-twice",
                    f"run {run_id}: step {record['step']} trained samples [{record['first_sample']}, "
                    f"{record['end_sample']}) after step {expected_step - 1} ended at sample {previous_end}",
                )
            )
        kept.append(record)
        reached = max(reached, int(record["step"]))
    held = [int(k["step"]) for k in kept]
    if run.get("state") == "SUCCEEDED" and total is not None and held != list(range(1, total + 1)):
        out.append(Violation("no-sample-twice", f"run {run_id} SUCCEEDED with steps {held} of 1-{total} in its model"))
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
