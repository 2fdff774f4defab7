"""End to end: three versions of one dataset land under a route with a promotion rule. Version 1's model
becomes production; version 2 (its labels shuffled) trains a model at chance, no better than the champion on its
held-out rows, and production stays; version 3 (the concept changed: the classes now differ along the other axis, so
the champion scores ~50 % on it) trains a better model, and production moves. Read back with a stock
aiplatform_v1.ModelServiceClient: three versions, the alias on the third, labels naming each run; the run records and
`landfall run` carry the decisions and both scores.

The route runs a team's container (tests/e2e/promotion_trainer.py: a standard-library nearest-centroid classifier,
every fourth row held out) so that the three trainings cost no torch start-up; it reads the champion's model.json
through the Vertex emulator's Cloud Storage stand-in and scores it on its own held-out rows. The built-in trainer's
champion scoring is tests/integration/trainer/test_champion_score.py.

Flake odds: none for these seeds (the data, the split and the training are deterministic). Over random seeds: the
clusters are 2 apart with a spread of 0.3 (3.3 standard deviations from each centroid to the boundary), so a model
of version 1 or 3 scores ~1.0 on its own concept; on version 2's 500 shuffled held-out rows both models are at chance
(standard deviation of the difference at most sqrt(0.5 / 500) = 0.032), so a margin of the rule's 0.15 (4.7 standard
deviations) wrongly promoting has odds below 1e-5; on version 3 the champion scores 0.5 +- 0.05 on 100 rows against
~1.0, a margin of ~0.5, whose odds of falling under 0.15 are nil."""

from __future__ import annotations

import random
from typing import Any

import grpc
import pytest
from google.cloud import aiplatform_v1
from google.cloud.aiplatform_v1.services.model_service.transports import ModelServiceGrpcTransport

from deploy.local import stack
from landfall.commands.runs import describe
from schemas.run_record import RunState, parse_run_record
from schemas.training_request import run_id_for
from tests.polling import wait_for

pytestmark = pytest.mark.e2e
PREFIX = "promoted/churn/"
MODEL_ID = "landfall-promoted-churn"


def _csv(rows: int, seed: int, axis: int, *, shuffle: bool = False) -> str:
    """Two well-separated classes, each row's drawn at random: label 1's points around +1 on `axis` (0: a, 1: b),
    label 0's around -1, spread 0.3."""
    rng = random.Random(seed)
    labels = [rng.randrange(2) for _ in range(rows)]
    points = []
    for y in labels:
        centre = [0.0, 0.0]
        centre[axis] = 1.0 if y else -1.0
        points.append((rng.gauss(centre[0], 0.3), rng.gauss(centre[1], 0.3)))
    if shuffle:
        rng.shuffle(labels)
    return "a,b,label\n" + "".join(f"{a:.4f},{b:.4f},{y}\n" for (a, b), y in zip(points, labels, strict=True))


def _land(bucket: Any, text: str) -> str:
    """A new version of the dataset: its data replaced, the marker written again. Its run id."""
    bucket.blob(f"{PREFIX}part-0.csv").upload_from_string(text, content_type="text/csv")
    marker = bucket.blob(f"{PREFIX}_SUCCESS")
    marker.upload_from_string(b"")
    return run_id_for(f"gcs:{bucket.name}/{PREFIX}:{marker.generation}")


def _registered(local_stack: stack.StackInfo, runs: Any, run_id: str) -> Any:
    def done() -> Any:
        snap = runs.document(run_id).get()
        run = parse_run_record(snap.to_dict()) if snap.exists else None
        if run is not None and run.state.terminal and run.state != RunState.SUCCEEDED:
            raise AssertionError(f"run {run_id} ended {run.state}: {run.error}")
        return run if run is not None and run.model is not None else None

    try:
        return wait_for(done, 180, f"run {run_id} to succeed and register its model", step=0.5)
    except AssertionError:
        logs = local_stack.state_dir / "logs"
        tails = {p.name: p.read_text(errors="replace")[-1500:] for p in sorted(logs.glob("*.log"))}
        raise AssertionError(f"run {run_id} registered no model; logs: {tails}") from None


def test_a_better_model_takes_production_and_a_worse_one_does_not(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any
) -> None:
    first = _registered(local_stack, firestore_runs, _land(landing_bucket, _csv(400, 1, axis=0)))
    second = _registered(local_stack, firestore_runs, _land(landing_bucket, _csv(2000, 2, axis=0, shuffle=True)))
    third = _registered(local_stack, firestore_runs, _land(landing_bucket, _csv(400, 3, axis=1)))
    decisions = [r.model.promotion for r in (first, second, third)]
    assert all(p is not None for p in decisions)
    assert [p.decision for p in decisions] == ["first", "kept", "promoted"], [p.reason for p in decisions]
    for p in decisions[1:]:
        assert p.champion_version == "1" and p.champion_score is not None and p.challenger_score is not None
        assert "held-out split of gs://" in p.data
    trained, shuffled = (r.metrics["final"]["accuracy"] for r in (first, second))
    assert trained > 0.95 and shuffled < 0.6, ("version 1 learnt, shuffled at chance", trained, shuffled)
    better, champion = decisions[2].challenger_score, decisions[2].champion_score
    assert better is not None and champion is not None and better - champion >= 0.15
    assert "promotion promoted" in describe(third), "landfall run shows the decision"

    client = aiplatform_v1.ModelServiceClient(
        transport=ModelServiceGrpcTransport(channel=grpc.insecure_channel(local_stack.env["LANDFALL_VERTEX_ENDPOINT"]))
    )
    name = f"{first.model.model}"
    assert name.endswith(f"/models/{MODEL_ID}")
    versions = sorted(client.list_model_versions(name=name), key=lambda v: int(v.version_id))
    assert [v.labels["landfall-run"] for v in versions] == [first.run_id, second.run_id, third.run_id]
    assert ["production" in v.version_aliases for v in versions] == [False, False, True]
    assert client.get_model(name=f"{name}@production").artifact_uri == third.artifacts.model_dir
