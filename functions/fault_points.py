"""Fault points: named places at the step boundaries of each function where the fault campaign (`make campaign`,
tests/campaign/) makes an instance fail, to prove that every step survives a crash between it and the next.

Off unless LANDFALL_FAULT_POINTS is set; the environment is read once, and a fault point that is off costs one
check of a module-level constant. The variable holds `NAME=MODE@PROBABILITY` entries separated by commas, e.g.
`dispatch.after_claim=crash@1,listener.after_record=raise@0.5`:

- `crash`: the process exits at once (os._exit, no cleanup, no answer), as an instance that is killed; the push
  is unanswered and Pub/Sub redelivers it.
- `raise`: an InjectedFault (an unexpected error) is raised; the entry point answers 500 and Pub/Sub redelivers.

FAULT_POINTS is the one table of names: a name not in it is refused, so a typo cannot leave a campaign inert.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from functions.settings import FAULT_POINTS_ENV as ENV
from functions.settings import fault_points_setting

CRASH_EXIT_CODE = 70
"""The exit status of a process a `crash` fault point ended (EX_SOFTWARE), so its log and exit are recognisable."""

FAULT_POINTS: dict[str, str] = {
    "ingest.after_read": "ingest read the completing object and its dataset, before claiming the version",
    "ingest.after_claim": "ingest claimed the dataset version (CLAIMED under a lease), before evaluating it",
    "ingest.after_publish": "ingest published the TrainingRequest, before marking the version PUBLISHED",
    "ingest.after_mark_published": "the version is PUBLISHED, before the dataset document says REQUESTED",
    "dispatch.after_record": "the run document exists (RECEIVED), before planning",
    "dispatch.after_plan": "the run is PLANNED, before claiming its submission",
    "dispatch.after_claim": "the submission is claimed (SUBMITTING under a lease), before the attempt is recorded",
    "dispatch.after_record_attempt": "the CreateCustomJob attempt is recorded, before it is made",
    "dispatch.after_create_job": "CreateCustomJob answered, before the run records the job (SUBMITTED)",
    "dispatch.after_record_submission": "the run is SUBMITTED, before the delivery is acknowledged",
    "listener.after_read_job": "the listener read the job from Vertex, before recording its state",
    "listener.after_record": "the job's state is recorded on the run, before RunFinished is announced",
    "reconciler.after_read_runs": "a reconcile pass read an open run from its listing, before acting on it",
    "reconciler.after_run": "a reconcile pass brought one run in line, before the next",
}
"""Every fault point, with where it sits. The campaign draws from this table."""

MODES = ("crash", "raise")


class InjectedFault(RuntimeError):
    """Raised by a fault point in `raise` mode: an unexpected error, retried like any other."""


@dataclass(frozen=True)
class Fault:
    mode: str
    probability: float


def parse(spec: str) -> dict[str, Fault]:
    """LANDFALL_FAULT_POINTS's text as {name: Fault}; ValueError names the bad entry and the valid forms."""
    faults: dict[str, Fault] = {}
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        name, _, setting = entry.partition("=")
        mode, _, chance = setting.partition("@")
        if name not in FAULT_POINTS:
            raise ValueError(f"{ENV}: unknown fault point {name!r} in {entry!r}; known: {', '.join(FAULT_POINTS)}")
        if mode not in MODES:
            raise ValueError(f"{ENV}: {entry!r} must be NAME=MODE@PROBABILITY with MODE one of {', '.join(MODES)}")
        try:
            probability = float(chance) if chance else 1.0
        except ValueError:
            probability = -1.0
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"{ENV}: {entry!r} needs a probability between 0 and 1 after '@', e.g. {name}=crash@0.3")
        faults[name] = Fault(mode, probability)
    return faults


def from_env(environ: Mapping[str, str] | None = None) -> dict[str, Fault]:
    return parse(fault_points_setting(environ))


_ACTIVE: dict[str, Fault] = from_env()


def configure(faults: Mapping[str, Fault]) -> None:
    """Replace the active faults (tests; a process reads LANDFALL_FAULT_POINTS once, at import)."""
    global _ACTIVE
    _ACTIVE = dict(faults)


def fault_point(name: str) -> None:
    """Fail here when LANDFALL_FAULT_POINTS says so; otherwise do nothing."""
    if not _ACTIVE:
        return
    fault = _ACTIVE.get(name)
    if fault is None or random.random() >= fault.probability:
        return
    print(f"landfall fault point {name}: {fault.mode}", file=sys.stderr, flush=True)
    if fault.mode == "crash":
        os._exit(CRASH_EXIT_CODE)
    raise InjectedFault(f"fault point {name} fired ({ENV})")


__all__ = ["CRASH_EXIT_CODE", "ENV", "FAULT_POINTS", "Fault", "InjectedFault", "configure", "fault_point", "parse"]
