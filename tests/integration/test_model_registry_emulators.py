"""A SUCCEEDED run's model into Model Registry through the real adapters, the runs store on the Firestore
emulator and ModelRegistry on the Vertex emulator's ModelService (the job itself a real emulator job). Redelivered
job events and reconcile passes at once upload the model once; the champion/challenger rule moves `production`
only for a better model; a stock ModelServiceClient reads back the versions, aliases and labels."""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.cloud import aiplatform_v1
from google.cloud.aiplatform_v1.services.model_service.transports import ModelServiceGrpcTransport

from functions.envelopes import PubSubMessage
from functions.gcp.model_promotions_store import ModelPromotionsStore
from functions.gcp.model_registry import ModelRegistry
from functions.gcp.rate_limits_store import RateLimitsStore
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import RUN_LABEL, VertexJobs
from functions.listener.handler import ListenerDeps, handle_job_event
from functions.reconciler.handler import OPEN_STATES, ReconcilerDeps, _reconcile
from functions.records.attempts import AttemptPolicy
from functions.records.model_registration import QUEUED, Target, register_model
from functions.records.results import announce
from schemas.model_version import PromotionRule
from schemas.run_finished import RunFinished
from schemas.run_record import Artifacts, RunState, VertexJobRef, new_run
from schemas.training_request import parse_training_request
from tests.conftest import PROJECT
from tests.fakes.world import job_event

REGION = "us-central1"
EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
MODEL_ID = "landfall-promoted-iris"
RULE = PromotionRule(metric="accuracy", direction="higher", min_improvement=0.01)


@pytest.fixture(scope="module")
def vertex_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.integration.vertex_emulator.harness import launch_emulator

    folder = tmp_path_factory.mktemp("vertex-models")
    process = launch_emulator(folder / "state", folder / "emulator.log")
    yield process
    process.stop()


def model_client(address: str) -> aiplatform_v1.ModelServiceClient:
    return aiplatform_v1.ModelServiceClient(transport=ModelServiceGrpcTransport(channel=grpc.insecure_channel(address)))


def job_client(address: str) -> aiplatform_v1.JobServiceClient:
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

    return aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(address)))


class Stack:
    """The adapters the listener and reconciler use, on the emulators; published RunFinished messages counted."""

    def __init__(self, address: str, runs: RunsStore, model_id: str, promotions: ModelPromotionsStore) -> None:
        self.runs = runs
        self.promotions = promotions
        self.vertex = VertexJobs(PROJECT, lambda region: job_client(address))
        self.registry = ModelRegistry(PROJECT, REGION, lambda region: model_client(address))
        self.model_id = model_id
        self.metrics: dict[str, dict[str, Any]] = {}
        self.published: list[RunFinished] = []
        self._lock = threading.Lock()
        self.builtin_serving = True
        self.limiter: RateLimitsStore | None = None

    def target(self, request: dict[str, Any]) -> Target:
        return Target(self.model_id, "promoted/iris", "promoted", "iris", RULE, "serving:image", self.builtin_serving)

    def publish(self, message: RunFinished) -> str:
        with self._lock:
            self.published.append(message)
            return str(len(self.published))

    def announce(self, run_id: str) -> str:
        now = lambda: datetime.now(UTC)  # noqa: E731
        said = register_model(
            run_id,
            self.runs,
            self.registry,
            self.target,
            now=now,
            promotions=self.promotions,
            holds_model=lambda folder: True,
            limiter=self.limiter,
            region=REGION,
        )
        if said in ("registering-elsewhere", QUEUED):
            return said  # as functions/wiring.py _announce: the lease holder, or the pass after the slot, announces
        return announce(run_id, self.runs, self.publish, now=now)

    def read_text(self, uri: str) -> str | None:
        run_id = uri.split("/runs/")[1].split("/")[0]
        return json.dumps(self.metrics[run_id]) if uri.endswith("metrics.json") else None

    def listener(self) -> ListenerDeps:
        return ListenerDeps(
            store=self.runs,
            vertex=self.vertex,
            read_text=self.read_text,
            now=lambda: datetime.now(UTC),
            announce=self.announce,
        )

    def reconciler(self) -> ReconcilerDeps:
        return ReconcilerDeps(
            open_runs=lambda: self.runs.in_states(OPEN_STATES),
            vertex=self.vertex,
            listener=self.listener(),
            resubmit=lambda run_id: "unused",
            policy=AttemptPolicy(),
            lease_seconds=120,
            now=lambda: datetime.now(UTC),
            unannounced=self.runs.unannounced,
            announce=self.announce,
        )

    def succeeded_job(self, vertex_emulator: Any, run_id: str, tmp: Path, metrics: dict[str, Any]) -> str:
        """A run RUNNING a real emulator job that has succeeded; its metrics.json as given. The job's id."""
        from tests.integration.vertex_emulator.harness import probe_job, probe_pool

        request = parse_training_request((EXAMPLES / "training_request.json").read_bytes()).to_dict()
        job = self.vertex.create(REGION, probe_job([probe_pool(tmp / run_id)], labels={RUN_LABEL: run_id}))
        vertex_emulator.wait_terminal(job.name)
        out = f"gs://landfall-local/runs/{run_id}/"
        run = replace(
            new_run(run_id, request, now=datetime.now(UTC)),
            state=RunState.RUNNING,
            vertex=VertexJobRef(job.name, job.job_id, REGION, state="JOB_STATE_RUNNING"),
            artifacts=Artifacts(out, f"{out}model/", f"{out}checkpoints/", f"{out}logs/"),
        )
        self.runs.create_if_absent(run)
        self.metrics[run_id] = metrics
        return job.job_id


@pytest.fixture
def stack(clean_firestore: Any, vertex_emulator: Any, request: pytest.FixtureRequest) -> Stack:
    from google.cloud import firestore

    client = firestore.Client(project=PROJECT)
    model_id = f"{MODEL_ID}-{request.node.name[-20:].lower().strip('_')}"[:63]
    return Stack(vertex_emulator.address, RunsStore(client, "runs"), model_id, ModelPromotionsStore(client, "leases"))


def _metrics(accuracy: float, champion: tuple[str, float] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "final": {"loss": 0.3, "accuracy": accuracy},
        "evaluation": {"split": "held-out", "samples": 30},
    }
    if champion:
        doc["champion"] = {"version": champion[0], "final": {"accuracy": champion[1]}, "samples": 30}
    return doc


def test_redelivered_job_events_and_reconcile_passes_at_once_upload_the_model_once(
    stack: Stack, vertex_emulator: Any, tmp_path: Path
) -> None:
    run_id = "run-registry-once"
    job_id = stack.succeeded_job(vertex_emulator, run_id, tmp_path, _metrics(0.9))
    data = job_event(job_id)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def deliver(i: int) -> None:
        try:
            message = PubSubMessage(data=data, message_id=f"m-{i}", publish_time=datetime.now(UTC).isoformat())
            outcomes.append(handle_job_event(message, stack.listener()))
        except BaseException as exc:
            errors.append(exc)

    def reconcile() -> None:
        try:
            outcomes.append(_reconcile(stack.reconciler()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(6)]
    threads += [threading.Thread(target=reconcile) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # A delivery that lost a race may have raised TransientError (it is retried): one more of each settles it.
    deliver(99)
    reconcile()
    assert not [e for e in errors if "TransientError" not in type(e).__name__], errors

    client = model_client(vertex_emulator.address)
    versions = list(
        client.list_model_versions(
            request={"name": stack.registry.model_name(stack.model_id), "filter": f'labels.landfall-run="{run_id}"'}
        )
    )
    assert len(versions) == 1, [v.version_id for v in versions]
    run = stack.runs.get(run_id)
    assert run is not None and run.state == RunState.SUCCEEDED and run.model is not None
    assert run.model.version_id == versions[0].version_id and "production" in versions[0].version_aliases
    assert [m.run_id for m in stack.published] == [run_id], "RunFinished once, naming the version"
    assert stack.published[0].model["version_id"] == versions[0].version_id


def test_a_better_model_moves_production_and_a_worse_one_leaves_it(
    stack: Stack, vertex_emulator: Any, tmp_path: Path
) -> None:
    champion = f"{stack.registry.model_name(stack.model_id)}@1"
    for run_id, metrics in (
        ("run-v1", _metrics(0.80)),
        ("run-v2", _metrics(0.55, (champion, 0.80))),
        ("run-v3", _metrics(0.95, (champion, 0.80))),
    ):
        job_id = stack.succeeded_job(vertex_emulator, run_id, tmp_path, metrics)
        handle_job_event(PubSubMessage(data=job_event(job_id), message_id=run_id), stack.listener())
        run = stack.runs.get(run_id)
        assert run is not None and run.model is not None and run.model.promotion is not None
    decisions = {r: _decision(stack, r) for r in ("run-v1", "run-v2", "run-v3")}
    assert decisions == {"run-v1": "first", "run-v2": "kept", "run-v3": "promoted"}

    client = model_client(vertex_emulator.address)
    versions = sorted(
        client.list_model_versions(request={"name": stack.registry.model_name(stack.model_id)}),
        key=lambda v: int(v.version_id),
    )
    assert [v.labels["landfall-run"] for v in versions] == ["run-v1", "run-v2", "run-v3"]
    assert [("production" in v.version_aliases) for v in versions] == [False, False, True]
    production = client.get_model(name=f"{stack.registry.model_name(stack.model_id)}@production")
    assert production.version_id == "3" and production.artifact_uri == "gs://landfall-local/runs/run-v3/model/"
    assert production.labels["landfall-decision"] == "promoted"
    spec = production.container_spec
    assert (spec.image_uri, list(spec.command)) == ("serving:image", ["python", "-m", "trainer.serve"])
    assert (spec.health_route, spec.predict_route, spec.ports[0].container_port) == ("/health", "/predict", 8080)
    read = stack.registry.get(f"{stack.registry.model_name(stack.model_id)}@production")
    assert read is not None and read.metadata["promotion"]["champion_version"] == "1", "the evidence on the version"
    assert read.metadata["lineage"]["dataset"]["version_key"], "and its lineage"


def _decision(stack: Stack, run_id: str) -> str:
    run = stack.runs.get(run_id)
    assert run is not None and run.model is not None and run.model.promotion is not None
    return run.model.promotion.decision


def test_the_cli_lists_shows_rolls_back_and_promotes_against_the_emulator(
    stack: Stack, vertex_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from landfall.commands import models

    champion = f"{stack.registry.model_name(stack.model_id)}@1"
    for run_id, metrics in (("run-c1", _metrics(0.70)), ("run-c2", _metrics(0.99, (champion, 0.70)))):
        job_id = stack.succeeded_job(vertex_emulator, run_id, tmp_path, metrics)
        handle_job_event(PubSubMessage(data=job_event(job_id), message_id=run_id), stack.listener())
    monkeypatch.setattr(models, "_registry", lambda: stack.registry)
    monkeypatch.setattr(models, "_runs", lambda: stack.runs)
    monkeypatch.setattr(models, "read_run", lambda run_id, command: stack.runs.get(run_id))

    models.cmd_models(argparse.Namespace(name=stack.model_id, json=False))
    table = capsys.readouterr().out
    assert "run-c1" in table and "run-c2" in table and "promoted" in table and "production" in table, table
    models.cmd_models(argparse.Namespace(name="", json=True))
    listed = json.loads(capsys.readouterr().out)
    assert {v["labels"]["landfall-run"] for v in listed if v["model"].endswith(stack.model_id)} == {"run-c1", "run-c2"}
    models.cmd_model(argparse.Namespace(version=f"{stack.model_id}@production", json=False))
    shown = capsys.readouterr().out
    assert "decision:  promoted" in shown and "run-c2" in shown and "accuracy 0.9900" in shown, shown

    models.cmd_rollback(argparse.Namespace(model=stack.model_id))
    assert _production(stack) == "1"
    assert _decision(stack, "run-c1") == "manual-rollback"
    models.cmd_promote(argparse.Namespace(run_id="run-c2"))
    assert _production(stack) == "2"
    assert _decision(stack, "run-c2") == "manual-promote"
    capsys.readouterr()
    models.cmd_models(argparse.Namespace(name=stack.model_id, json=False))  # read from the runs in Firestore
    rows = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert "manual-rollback" in rows["1"] and "manual-promote" in rows["2"], rows


def _production(stack: Stack) -> str:
    found = stack.registry.get(f"{stack.registry.model_name(stack.model_id)}@production")
    return "" if found is None else found.version_id


def test_with_the_submission_limiter_set_no_upload_is_refused_and_a_far_slot_is_uploaded_by_a_later_pass(
    stack: Stack, vertex_emulator: Any, tmp_path: Path
) -> None:
    """UploadModel counts in Google's "Job or LRO submission requests" quota (docs/deploy.md, "Vertex AI rate
    limits"): the emulator allows one upload in 10 s, the limiter hands out a slot every 12 s (5 a minute). Three
    runs succeed at once: the first uploads at once, the others keep their slots (12 and 24 s on) and reconcile
    passes after them upload; Vertex refuses none, and each run is announced once with its version."""
    from google.cloud import firestore

    from deploy.vertex_emulator import control
    from tests.polling import wait_for

    stack.limiter = RateLimitsStore(firestore.Client(project=PROJECT), "rate_limits", per_minute=5)
    run_ids = [f"run-limited-{i}" for i in range(3)]
    jobs = [stack.succeeded_job(vertex_emulator, run_id, tmp_path, _metrics(0.9)) for run_id in run_ids]
    rule = {"method": "UploadModel", "limit": 1, "window_seconds": 10, "region": REGION}
    control.set_faults(vertex_emulator.address, {"rate_limits": [rule]})
    try:
        said = [
            handle_job_event(PubSubMessage(data=job_event(job_id), message_id=job_id), stack.listener())
            for job_id in jobs
        ]
        queued = [stack.runs.get(run_id) for run_id in run_ids[1:]]
        assert all(r is not None and r.model is None and r.submission.model_slot_at for r in queued), said

        def registered() -> bool:
            _reconcile(stack.reconciler())
            return all((r := stack.runs.get(run_id)) is not None and r.model is not None for run_id in run_ids)

        wait_for(registered, 90, "the queued uploads to be made by reconcile passes after their slots")
        calls = control.get_faults(vertex_emulator.address)["calls"]
        assert isinstance(calls, dict) and calls[f"UploadModel {REGION}"] == {"calls": 3, "refused": 0}, calls
    finally:
        control.set_faults(vertex_emulator.address, {})
    assert sorted(m.run_id for m in stack.published) == run_ids, "each run announced once, with its version"
    assert all(m.model and m.model["version_id"] for m in stack.published)


def test_figures_that_are_not_finite_never_reach_a_version_and_the_registry_stays_readable(
    stack: Stack, vertex_emulator: Any, tmp_path: Path
) -> None:
    """A team's code reported NaN and Infinity: the run SUCCEEDED with warnings, its model registered and announced,
    its version holding the finite figures only (the emulator, like protobuf's JSON writer, refuses an upload whose
    metadata holds Infinity: the run was never announced). A version holding one uploaded on Vertex before the
    rules reads without it: tests/unit/test_hostile_figures.py."""
    metrics = {"final": {"loss": float("nan"), "accuracy": 0.9, "step_seconds": float("inf")}}
    job_id = stack.succeeded_job(vertex_emulator, "run-finite", tmp_path, metrics)
    handle_job_event(PubSubMessage(data=job_event(job_id), message_id="finite"), stack.listener())
    run = stack.runs.get("run-finite")
    assert run is not None and run.state == RunState.SUCCEEDED and run.model is not None, run
    assert len(run.warnings) == 2 and [p.run_id for p in stack.published] == ["run-finite"]
    version = stack.registry.get(run.model.version_name)
    assert version is not None and version.metadata["final"] == {"accuracy": 0.9}
    assert stack.model_id in {m.model_id for m in stack.registry.models()}
    production = stack.registry.get(f"{stack.registry.model_name(stack.model_id)}@production")
    assert production is not None and production.version_id == run.model.version_id


def test_four_challengers_of_one_folder_finishing_at_once_end_with_production_on_the_best(stack: Stack) -> None:
    """Each scored the same champion on the folder's held-out data and beats it; registered at once, their promotions
    are decided one at a time (the model's lease on the Firestore emulator) against production as it is then:
    production ends on the best, and only its run says promoted."""
    request = parse_training_request((EXAMPLES / "training_request.json").read_bytes()).to_dict()

    def succeeded(run_id: str, metrics: dict[str, Any]) -> None:
        out = f"gs://landfall-local/runs/{run_id}/"
        stack.runs.create_if_absent(
            replace(
                new_run(run_id, request, now=datetime.now(UTC)),
                state=RunState.SUCCEEDED,
                metrics=metrics,
                artifacts=Artifacts(out, f"{out}model/", f"{out}checkpoints/", f"{out}logs/"),
            )
        )

    succeeded("run-four-0", _metrics(0.80))
    assert stack.announce("run-four-0").startswith("announced")
    champion = f"{stack.registry.model_name(stack.model_id)}@1"
    scores = {"run-four-a": 0.86, "run-four-b": 0.95, "run-four-c": 0.90, "run-four-d": 0.88}
    for run_id, score in scores.items():
        succeeded(run_id, _metrics(score, (champion, 0.80)))
    outcomes: list[str] = []
    threads = [threading.Thread(target=lambda r=r: outcomes.append(stack.announce(r))) for r in scores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    production = stack.registry.get(f"{stack.registry.model_name(stack.model_id)}@production")
    assert production is not None and production.metadata["run_id"] == "run-four-b", outcomes
    decisions = {}
    for run_id in scores:
        run = stack.runs.get(run_id)
        assert run is not None and run.model is not None and run.model.promotion is not None, outcomes
        decisions[run_id] = (run.model.promotion.decision, run.model.promotion.reason)
    assert [r for r, (d, _) in decisions.items() if d == "promoted"] == ["run-four-b"], decisions
    assert {d for d, _ in decisions.values()} <= {"promoted", "kept", "superseded"}, decisions
