"""Where one dataset's time went, from the marker's finalize to CreateCustomJob answered, read from stamps the
records already carry: the ingest version document (claimed, published) and the run's history and attempts.

Each stamp is taken by the code that does the step, just before its Firestore write, so a hop is the work named
plus the write that ends the hop before it:

  notification   finalize -> ingest claims the version: fake-gcs-server's notification, Pub/Sub, the delivery
                 bridge's pull and push, functions-framework, the outbox read, the object's stat
  ingest         version claimed -> request published: claim transaction, listing, content claim, publish
  delivery       request published -> run RECEIVED: Pub/Sub, the bridge, functions-framework, request parse
  plan           RECEIVED -> PLANNED: the run created (a transaction), the request checked and planned
  transactions   PLANNED -> the Vertex job's create_time: the write(s) before CreateCustomJob (one
                 transaction: PLANNED, the claim and the first attempt) and the call reaching the emulator
  create         job create_time -> submitted_at: CreateCustomJob answering and the dispatcher reading the answer
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bench.local_stack.harness import seconds
from schemas.run_record import RunRecord, RunState

HOPS = ("notification", "ingest", "delivery", "plan", "transactions", "create")


@dataclass(frozen=True)
class Timeline:
    """One run's latencies in seconds (None where a stamp is missing)."""

    run_id: str
    to_submitted: float | None
    """finalize -> run.timings.submitted_at (CreateCustomJob answered)."""
    to_succeeded: float | None
    """finalize -> the SUCCEEDED history entry."""
    hops: dict[str, float | None]


def _at(run: RunRecord, state: RunState) -> str | None:
    return next((c.at for c in run.history if c.state == state), None)


def timeline(
    run: RunRecord, version: dict[str, Any] | None, finalized: datetime, job_created: datetime | None = None
) -> Timeline:
    """The run's hops; version is its ingest version document, job_created its Vertex job's create_time."""
    claimed = (version or {}).get("created_at")
    published = (version or {}).get("updated_at")
    stamps = [
        finalized,
        claimed,
        published,
        _at(run, RunState.RECEIVED),
        _at(run, RunState.PLANNED),
        job_created,
        run.timings.submitted_at,
    ]
    hops = {name: seconds(later, earlier) for name, earlier, later in zip(HOPS, stamps, stamps[1:], strict=False)}
    return Timeline(
        run.run_id, seconds(run.timings.submitted_at, finalized), seconds(_at(run, RunState.SUCCEEDED), finalized), hops
    )
