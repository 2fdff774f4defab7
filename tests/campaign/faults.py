"""What the campaign can do to the stack, and the draw: trial N of seed S always gets the same fault."""

from __future__ import annotations

import random
from dataclasses import dataclass

from functions.fault_points import FAULT_POINTS

SERVICE_OF_POINT = {
    "ingest": "on_object_finalized",
    "dispatch": "dispatch",
    "listener": "on_job_event",
    "reconciler": "reconcile_runs",
}
"""The local stack service whose process runs each function's fault points."""
RESTARTABLE_FUNCTIONS = ("on_object_finalized", "dispatch", "on_job_event", "reconcile_runs")

KINDS: dict[str, str] = {
    "none": "no fault (control)",
    "crash_point": "a function process exits at a fault point (LANDFALL_FAULT_POINTS=NAME=crash@1), then restarts",
    "raise_point": "a fault point raises an unexpected error half the times it is passed (raise@0.5)",
    "function_restart": "`landfall restart FUNCTION` while the trial's messages are in flight",
    "request_storm": "the trial's TrainingRequest published again 5-20 times, some after the run ended",
    "object_event_storm": "the _SUCCESS notification published again 5-20 times",
    "job_event_storm": "the job's log entries published again, newest first (reordered), 3-8 times",
    "vertex_quota": "CreateCustomJob answers RESOURCE_EXHAUSTED (quota) everywhere for a while",
    "vertex_stockout": "jobs are accepted, then FAIL for a stockout, for a while",
    "vertex_unavailable": "the next 1-6 JobService calls answer UNAVAILABLE",
    "vertex_preemption": "Spot jobs are preempted once after their trainers' first checkpoints (SIGTERM, 5 s of grace)",
    "vertex_restart": "`landfall restart vertex` while the trial's job runs",
    "trainer_kill": "the trial's replica process is killed (SIGKILL) while it runs",
}
"""Every fault kind the draw picks from, equally likely."""


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str = ""
    """A fault point (crash_point, raise_point) or a service (function_restart)."""
    count: int = 0
    """Copies (storms) or UNAVAILABLE answers."""
    delay: float = 0.0
    """Seconds after the drop before the fault is applied (function_restart)."""

    def describe(self) -> str:
        return " ".join(
            str(p) for p in (self.kind, self.target, self.count or "", f"{self.delay:g}s" if self.delay else "") if p
        )


def draw(seed: int, trial: int) -> Fault:
    """The fault of one trial: the same for the same seed and trial number, whatever ran before."""
    rng = random.Random(f"landfall-campaign:{seed}:{trial}")
    kind = rng.choice(sorted(KINDS))
    if kind in ("crash_point", "raise_point"):
        return Fault(kind, target=rng.choice(sorted(FAULT_POINTS)))
    if kind == "function_restart":
        return Fault(kind, target=rng.choice(RESTARTABLE_FUNCTIONS), delay=round(rng.uniform(0.0, 4.0), 1))
    if kind in ("request_storm", "object_event_storm"):
        return Fault(kind, count=rng.randint(5, 20))
    if kind == "job_event_storm":
        return Fault(kind, count=rng.randint(3, 8))
    if kind == "vertex_unavailable":
        return Fault(kind, count=rng.randint(1, 6))
    return Fault(kind)


def service_of(point: str) -> str:
    return SERVICE_OF_POINT[point.split(".")[0]]


def fault_points_env(faults: list[Fault]) -> dict[str, str]:
    """LANDFALL_FAULT_POINTS per service for the fault points among faults (one batch's trials)."""
    entries: dict[str, list[str]] = {}
    for fault in faults:
        if fault.kind in ("crash_point", "raise_point"):
            mode = "crash@1" if fault.kind == "crash_point" else "raise@0.5"
            entries.setdefault(service_of(fault.target), []).append(f"{fault.target}={mode}")
    return {service: ",".join(sorted(set(e))) for service, e in entries.items()}


def vertex_plan(faults: list[Fault]) -> dict:
    """The Vertex emulator fault plan (docs/vertex_emulator.md) for the Vertex faults among faults."""
    plan: dict = {}
    kinds = {f.kind for f in faults}
    if "vertex_quota" in kinds:
        plan["quota_exhausted"] = [{}]
    if "vertex_stockout" in kinds:
        plan["stockout"] = [{}]
    if "vertex_preemption" in kinds:
        # turned on by the batch once its preemption trials' trainers are past their first checkpoint (a trainer's
        # start-up, torch's import, takes seconds to a minute with a batch of replicas starting at once): every Spot
        # job running then is preempted at once, mid-training, after a checkpoint or between two
        plan["spot_preemption"] = {"after_seconds": 0, "times": 1, "grace_seconds": 5}
    unavailable = sum(f.count for f in faults if f.kind == "vertex_unavailable")
    if unavailable:
        plan["unavailable_calls"] = unavailable
    return plan
