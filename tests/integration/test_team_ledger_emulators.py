"""Teams through the real Firestore adapters (docs/teams.md): a burst of requests of one team dispatched at once,
each delivery claiming its run and the team's ledger in one Firestore transaction on the emulator. The team's GPU
cap holds: exactly as many runs as fit are submitted and the rest WAIT (team-cap), the ledger counts exactly the
GPUs of the submitted runs, and a run's end settles its reservation once, however often its event is delivered."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from typing import Any

from functions.dispatch.handler import DispatchDeps, handle_training_request
from functions.envelopes import PubSubMessage
from functions.gcp.team_ledger_store import SettlingRunsStore, TeamLedgerStore
from functions.listener.handler import ListenerDeps, handle_job_event
from schemas.run_record import RunState
from schemas.training_request import parse_training_request
from tests.conftest import PROJECT, Emulator
from tests.fakes.ingest import Clock
from tests.fakes.teams import churn_team, numbered_request
from tests.fakes.vertex import FakeVertex
from tests.fakes.world import NOW, PLAN, SETTINGS, Outcome, job_event

BURST = 8
CAP = 3
TEAMS = churn_team(f"NVIDIA_TESLA_T4 = {CAP}")
ONE_GPU = replace(PLAN, accelerator_type="NVIDIA_TESLA_T4", accelerator_count=1, replica_count=1)


def _request(n: int) -> bytes:
    return numbered_request(n, "burst")


def test_the_cap_holds_under_concurrent_claims_and_settles_once(clean_firestore: Emulator) -> None:
    from google.cloud import firestore

    client: Any = firestore.Client(project=PROJECT)
    clock = Clock(NOW)
    ledger = TeamLedgerStore(client, SETTINGS.runs_collection, SETTINGS.teams_collection)
    runs = SettlingRunsStore(client, SETTINGS.runs_collection, ledger, now=clock)
    vertex = FakeVertex()
    deps = DispatchDeps(
        settings=SETTINGS,
        store=runs,
        vertex=vertex,  # type: ignore[arg-type]
        plan=lambda request: Outcome(ONE_GPU, ()),
        now=clock,
        teams=TEAMS,
        ledger=ledger,
        ingested=lambda request: True,  # ingest's requests (their data dropped under the team's prefix)
    )

    def deliver(n: int) -> str:
        return handle_training_request(PubSubMessage(data=_request(n), message_id=f"m-{n}"), deps)

    with ThreadPoolExecutor(max_workers=BURST) as pool:
        said = list(pool.map(deliver, range(BURST)))
    assert sorted(said) == sorted(["submitted"] * CAP + ["waiting:team-cap"] * (BURST - CAP)), said

    ids = [parse_training_request(_request(n)).run_id for n in range(BURST)]
    stored = {i: runs.get(i) for i in ids}
    submitted = [r for r in stored.values() if r is not None and r.state == RunState.SUBMITTED]
    waiting = [r for r in stored.values() if r is not None and r.state == RunState.WAITING]
    assert len(submitted) == CAP and len(waiting) == BURST - CAP and len(vertex.jobs) == CAP
    assert all(r.team is not None and r.team.held for r in submitted)
    assert all(r.submission.waiting is not None and r.submission.waiting.reason == "team-cap" for r in waiting)
    counted = ledger.ledgers(["churn"])["churn"]
    assert counted.gpus == {"NVIDIA_TESLA_T4": CAP}
    assert counted.month("2026-11").reserved_usd == round(CAP * ONE_GPU.estimated_cost_usd, 6)

    # One job ends; its event is delivered three times: one settle, one GPU freed.
    done = submitted[0]
    assert done.vertex is not None
    vertex.set_state(done.vertex.job_name, "JOB_STATE_SUCCEEDED", start=NOW, end=NOW + timedelta(minutes=30))
    clock.now = NOW + timedelta(minutes=30)
    listener = ListenerDeps(store=runs, vertex=vertex, read_text=lambda uri: None, now=clock)  # type: ignore[arg-type]
    event = PubSubMessage(data=job_event(done.vertex.job_id), message_id="e-1", publish_time=clock.now.isoformat())
    with ThreadPoolExecutor(max_workers=3) as pool:
        answers = list(pool.map(lambda _: handle_job_event(event, listener), range(3)))
    assert all(a.startswith("recorded:SUCCEEDED") for a in answers), answers
    after = ledger.ledgers(["churn"])["churn"]
    assert after.gpus == {"NVIDIA_TESLA_T4": CAP - 1}
    spend = after.month("2026-11")
    assert spend.settled_usd == round(ONE_GPU.hourly_cost_usd / 2, 6)
    assert spend.reserved_usd == round((CAP - 1) * ONE_GPU.estimated_cost_usd, 6)
    ended = runs.get(done.run_id)
    assert ended is not None and ended.team is not None and not ended.team.held
    assert ledger.held_to_settle() == []
