"""Reservations through the real adapters: the dispatcher with the runs store on the Firestore emulator and
VertexJobs on the Vertex emulator, planning with the real planner and a declared reservation (LANDFALL_RESERVATIONS).
A request naming the reservation is SUBMITTED as a job whose training pools consume it (reservationAffinity, read back
from the emulator); one naming a reservation the deployment does not declare is REJECTED with the reason and no job.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from functions.dispatch.handler import DispatchDeps, handle_training_request
from functions.dispatch.planner_config import planner_config
from functions.envelopes import PubSubMessage
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import RUN_LABEL, VertexJobs
from functions.planning import plan_input_from_request, plan_request
from functions.settings import settings_from_env
from schemas.run_record import RunState
from schemas.training_request import TrainingRequest
from tests.conftest import PROJECT
from tests.fakes.ingest import Clock
from tests.fakes.world import REQUEST, SETTINGS

RESERVATIONS = {"team-h100s": {"machine_type": "a3-highgpu-8g", "zone": "us-central1-a", "count": 2}}
RESERVED_SETTINGS = settings_from_env(
    {"GOOGLE_CLOUD_PROJECT": SETTINGS.project, "LANDFALL_RESERVATIONS": json.dumps(RESERVATIONS)}
)


@pytest.fixture(scope="module")
def vertex_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Vertex emulator whose trainer image runs a sleeper (the jobs here are cancelled, never trained)."""
    from tests.integration.vertex_emulator.harness import launch_emulator

    folder = tmp_path_factory.mktemp("vertex-reservations")
    images = folder / "images.json"
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    images.write_text(json.dumps({RESERVED_SETTINGS.trainer_image: sleeper}))
    process = launch_emulator(folder / "state", folder / "emulator.log", ["--images", str(images)])
    yield process
    process.stop()


def _plan(request: Any) -> Any:
    return plan_request(plan_input_from_request(request), planner_config(RESERVED_SETTINGS))


def _request(reservation: str) -> TrainingRequest:
    return replace(
        REQUEST,
        idempotency_key=f"reservation-{uuid.uuid4().hex}",
        task="causal-lm",
        model=replace(REQUEST.model, preset="gpt-1.3b"),
        constraints=replace(REQUEST.constraints, gpu_allowlist=(), regions=(), reservation=reservation),
    )


@pytest.fixture
def deps(clean_firestore: Any, vertex_emulator: Any) -> Iterator[DispatchDeps]:
    from google.cloud import firestore

    runs = RunsStore(firestore.Client(project=PROJECT), "runs")
    vertex = VertexJobs(PROJECT, lambda region: vertex_emulator.client)
    made = DispatchDeps(settings=RESERVED_SETTINGS, store=runs, vertex=vertex, plan=_plan, now=Clock(datetime.now(UTC)))
    yield made
    for job in vertex.list_labelled("us-central1"):
        if job.state not in ("JOB_STATE_CANCELLED", "JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"):
            vertex.cancel(job.name)


def test_a_named_reservation_is_consumed_by_every_training_pool_of_the_submitted_job(
    deps: DispatchDeps, vertex_emulator: Any
) -> None:
    request = _request("team-h100s")
    handle_training_request(PubSubMessage(data=request.to_json(), message_id="m-1"), deps)
    run = deps.store.get(request.run_id)
    assert run is not None and run.state == RunState.SUBMITTED, run
    assert run.plan is not None and run.plan.machine_type == "a3-highgpu-8g" and run.plan.replica_count <= 2
    assert run.plan.reservation == f"projects/{PROJECT}/zones/us-central1-a/reservations/team-h100s"
    assert run.plan.hourly_cost_usd == 0.0 or run.plan.reduction_server_replicas  # the machines are paid for
    assert run.vertex is not None
    job = vertex_emulator.client.get_custom_job(name=run.vertex.job_name)
    assert job.labels[RUN_LABEL] == request.run_id
    training = [p for p in job.job_spec.worker_pool_specs if p.machine_spec.accelerator_count]
    assert training and sum(p.replica_count for p in training) == run.plan.replica_count
    for pool in training:
        affinity = pool.machine_spec.reservation_affinity
        assert affinity.reservation_affinity_type.name == "SPECIFIC_RESERVATION"
        assert affinity.key == "compute.googleapis.com/reservation-name"
        assert list(affinity.values) == [run.plan.reservation]
    assert job.job_spec.scheduling.strategy.name == "STANDARD"


def test_a_reservation_the_deployment_does_not_declare_is_rejected_with_no_job(
    deps: DispatchDeps, vertex_emulator: Any
) -> None:
    request = _request("someone-elses")
    handle_training_request(PubSubMessage(data=request.to_json(), message_id="m-1"), deps)
    run = deps.store.get(request.run_id)
    assert run is not None and run.state == RunState.REJECTED and run.error is not None
    assert run.error.code == "invalid-request"
    assert "constraints.reservation 'someone-elses' is not a reservation Landfall knows (known: team-h100s)" in (
        run.error.message
    )
    jobs = [j for j in deps.vertex.list_labelled("us-central1") if j.labels.get(RUN_LABEL) == request.run_id]
    assert jobs == []
