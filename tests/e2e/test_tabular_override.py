"""End to end, as docs/ingest.md tells a user to do it: a dataset with a `landfall.json` override and text class
labels ends SUCCEEDED (landfall.json is not read as a shard; text labels train). The table is
small (80 rows): the trainer's size adaptation (trainer/sizing.py) trains it for min_steps optimizer steps, not the 3
epochs asked for, and the run record carries the warning that its held-out set is too small to trust."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from deploy.local import stack
from landfall.commands.runs import describe
from schemas.run_metrics import run_warnings
from schemas.run_record import TERMINAL_STATES, RunState, parse_run_record
from schemas.trainer_flags import HparamValues
from schemas.training_request import run_id_for
from tests.polling import wait_for

pytestmark = pytest.mark.e2e
LABELS = ("benign", "malignant")


def _csv(rows: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = ["radius,texture,area,diagnosis"]
    for _ in range(rows):
        radius, texture, area = rng.gauss(0, 1), rng.gauss(0, 1), rng.gauss(600, 300)
        lines.append(f"{radius:.4f},{texture:.4f},{area:.1f},{LABELS[int(radius + 2 * texture > 0.5)]}")
    return "\n".join(lines) + "\n"


def test_override_and_text_labels_end_succeeded(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any
) -> None:
    prefix = "datasets/e2e-override-text-labels/"
    for i in range(2):
        landing_bucket.blob(f"{prefix}part-{i:05d}.csv").upload_from_string(_csv(40, seed=i), content_type="text/csv")
    # the trainer's own defaults (the e2e route turns its size adaptation off: tests/e2e/routes.toml), and a batch
    # that 53 training rows can fill
    hyperparameters = {"epochs": 3, "batch_size": 16, "extra": {}}
    overrides = {"hyperparameters": hyperparameters, "model": {"label_column": "diagnosis"}}
    landing_bucket.blob(f"{prefix}landfall.json").upload_from_string(json.dumps(overrides))
    marker = landing_bucket.blob(f"{prefix}_SUCCESS")
    marker.upload_from_string(b"")
    run_id = run_id_for(f"gcs:{landing_bucket.name}/{prefix}:{marker.generation}")

    def ended() -> dict[str, Any] | None:
        snap = firestore_runs.document(run_id).get()
        doc = snap.to_dict() if snap.exists else None
        return doc if doc and RunState(doc["state"]) in TERMINAL_STATES else None

    try:
        doc = wait_for(ended, 240, f"run {run_id} to end", step=0.5)
    except AssertionError:
        snap = firestore_runs.document(run_id).get()
        logs = local_stack.state_dir / "logs"
        tails = {p.name: p.read_text()[-1500:] for p in sorted(logs.glob("*.log"))}
        raise AssertionError(f"run {run_id}: {snap.to_dict() if snap.exists else 'no record'}\n{tails}") from None
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    assert doc["request"]["hyperparameters"]["epochs"] == 3
    assert doc["request"]["model"]["label_column"] == "diagnosis"
    assert doc["request"]["dataset"]["object_count"] == 2  # landfall.json and _SUCCESS are not data
    # The version is a snapshot: the run trained on, and names, exactly the objects it recorded.
    parts = sorted((b.name.removeprefix(prefix), b) for b in landing_bucket.list_blobs(prefix=prefix + "part-"))
    recorded = [{"name": name, "generation": str(b.generation), "size": b.size} for name, b in parts]
    assert doc["request"]["dataset"]["objects"] == recorded
    assert doc["data_read"]["source"] == "request" and doc["data_read"]["objects"] == recorded
    assert doc["data_read"]["objects_digest"] == doc["request"]["dataset"]["objects_digest"]
    metrics, defaults = doc["metrics"], HparamValues()
    # 53 training rows are 3 steps an epoch: 3 epochs were 9 steps; the trainer added epochs up to min_steps
    assert metrics["steps"] >= defaults.min_steps and len(metrics["epochs"]) > 3
    # 80 rows: the held-out share grew to its cap (0.3), still under min_held_out rows, and the run says so
    evaluation = metrics["evaluation"]
    assert evaluation["split"] == "held-out" and evaluation["val_fraction"] == 0.3
    assert 0 < evaluation["samples"] < defaults.min_held_out
    (warning,) = run_warnings(metrics)
    assert warning.code == "small-held-out"
    assert f"warning   small-held-out: the held-out figures are measured on {evaluation['samples']} rows" in describe(
        parse_run_record(doc)
    )
    assert metrics["final"]["accuracy"] >= 0.9

    from trainer.model_io import load_model

    loaded = load_model(doc["artifacts"]["model_dir"])
    assert loaded.classes == list(LABELS)
    assert loaded.predict([[2.0, 2.0, 600.0], [-2.0, -2.0, 600.0]]) == ["malignant", "benign"]
