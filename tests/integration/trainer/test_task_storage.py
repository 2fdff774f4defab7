"""`python -m trainer.task` end to end in one process: data and outputs on fake-gcs-server, and on local disk."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests import datagen
from tests.trainer_runner import run_trainer, trainer_args, trainer_env

METRIC_KEYS = {
    "schema_version",
    "step_seconds",
    "peak_memory_bytes",
    "task",
    "model",
    "strategy",
    "world_size",
    "steps",
    "final",
    "epochs",
    "evaluation",
    "samples_per_second",
    "tokens_per_second",
    "wall_time_seconds",
    "mfu",
    "batch",
    "warnings",
    "data",
    "compile_seconds",
    "warmup",
    "resumed_from_step",
}


def _check_metrics(metrics: dict, epochs: int) -> None:
    assert set(metrics) == METRIC_KEYS
    assert metrics["schema_version"] == 1 and metrics["task"] == "tabular-classification"
    assert metrics["world_size"] == 1 and metrics["steps"] > 0
    assert metrics["resumed_from_step"] == 0, "a run that started fresh"
    assert [e["epoch"] for e in metrics["epochs"]] == list(range(1, epochs + 1))
    assert metrics["final"] == {k: metrics["epochs"][-1][k] for k in ("loss", "accuracy", "perplexity")}
    assert metrics["samples_per_second"] > 0 and metrics["wall_time_seconds"] > 0
    assert metrics["tokens_per_second"] is None and metrics["mfu"] is None
    batch = metrics["batch"]  # how each step's global batch was split: one process, one pass
    assert batch["processes"] == 1 and batch["gradient_accumulation_steps"] == 1
    assert batch["micro_batch_size"] == batch["global_batch_size"]


@pytest.fixture()
def gcs_bucket(gcs_emulator):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project="landfall-local", credentials=AnonymousCredentials())
    return client.create_bucket(f"trainer-{uuid.uuid4().hex[:10]}")


def test_trains_from_gcs_and_writes_model_and_metrics_to_gcs(gcs_bucket) -> None:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    gcs_bucket.blob("data/part-0.csv").upload_from_string(datagen.csv_text(datagen.separable_rows(600, 0)))
    rows = datagen.separable_rows(600, 1)
    parquet = io.BytesIO()  # a Parquet shard beside the CSV one: read by seeking through the blob reader
    pq.write_table(pa.table({name: [r[i] for r in rows] for i, name in enumerate(("a", "b", "c", "label"))}), parquet)
    gcs_bucket.blob("data/part-1.parquet").upload_from_string(parquet.getvalue())
    gcs_bucket.blob("data/_MANIFEST.json").upload_from_string("{}")
    base = f"gs://{gcs_bucket.name}/run/"
    env = trainer_env(
        AIP_MODEL_DIR=base + "model/", AIP_CHECKPOINT_DIR=base + "checkpoints/", AIP_TENSORBOARD_LOG_DIR=base + "logs/"
    )
    run = run_trainer(trainer_args(f"gs://{gcs_bucket.name}/data/", epochs=3, extra=("--checkpoint-every=25",)), env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    metrics = json.loads(gcs_bucket.blob("run/model/metrics.json").download_as_bytes())
    _check_metrics(metrics, epochs=3)
    assert metrics["final"]["accuracy"] >= 0.95
    # No snapshot in the arguments: the folder as listed, each object at the generation listed (_MANIFEST.json is
    # not data).
    listed = {b.name: b for b in gcs_bucket.list_blobs(prefix="data/")}
    assert metrics["data"]["source"] == "listing"
    assert metrics["data"]["objects"] == [
        {"name": n, "generation": str(listed[f"data/{n}"].generation), "size": listed[f"data/{n}"].size}
        for n in ("part-0.csv", "part-1.parquet")
    ]
    names = {b.name for b in gcs_bucket.list_blobs(prefix="run/")}
    assert {"run/model/model.pt", "run/model/config.json"} <= names
    assert any(n.startswith("run/logs/events.out.tfevents.") for n in names)
    assert any(n.startswith("run/checkpoints/step-") and n.endswith("/commit.json") for n in names)

    import torch

    from trainer.model_io import load_model

    loaded = load_model(base + "model/")
    rows = datagen.separable_rows(200, seed=99)
    labels = loaded.predict([list(r[:3]) for r in rows])
    assert isinstance(labels, torch.Tensor), f"numeric labels should come back as a tensor, got {type(labels)}"
    predicted = labels.tolist()
    assert sum(p == r[3] for p, r in zip(predicted, rows, strict=True)) / len(rows) >= 0.9


def test_trains_from_a_local_directory_without_any_distributed_env(tmp_path: Path) -> None:
    data = datagen.write_csv_shards(tmp_path / "data", shards=3, rows_per_shard=300)
    env = trainer_env(AIP_MODEL_DIR=str(tmp_path / "model"))
    run = run_trainer(trainer_args(str(data), epochs=2), env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    metrics = json.loads((tmp_path / "model" / "metrics.json").read_text())
    _check_metrics(metrics, epochs=2)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["data"]["feature_names"] == ["a", "b", "c"] and config["data"]["n_outputs"] == 2
    assert all("severity" in r and "message" in r for r in run.records())
    started = run.messages("training started")
    assert started and started[0]["world_size"] == 1 and started[0]["precision"] == "fp32"


def test_regression_from_parquet_predicts_in_the_label_units(tmp_path: Path) -> None:
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(n: int, seed: int) -> dict[str, list[float]]:
        rng = random.Random(seed)
        a = [rng.gauss(0, 1) for _ in range(n)]
        b = [rng.uniform(-2, 2) for _ in range(n)]
        price = [1000 + 300 * x - 200 * y + rng.gauss(0, 5) for x, y in zip(a, b, strict=True)]
        return {"a": a, "b": b, "price": price}

    data = tmp_path / "data"
    data.mkdir()
    for shard in range(2):
        pq.write_table(pa.table(table(600, shard)), data / f"part-{shard}.parquet")
    env = trainer_env(AIP_MODEL_DIR=str(tmp_path / "model"))
    run = run_trainer(
        trainer_args(str(data), task="tabular-regression", epochs=4, batch_size=32, extra=("--label-column=price",)),
        env,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    metrics = json.loads((tmp_path / "model" / "metrics.json").read_text())
    assert metrics["final"]["accuracy"] is None and metrics["final"]["perplexity"] is None
    assert metrics["final"]["loss"] < 0.05  # MSE of the standardised target: it explains > 95 % of the variance

    import torch

    from trainer.model_io import load_model

    model = load_model(str(tmp_path / "model"))
    fresh = table(200, seed=42)
    values = model.predict([[x, y] for x, y in zip(fresh["a"], fresh["b"], strict=True)])
    assert isinstance(values, torch.Tensor), f"a regression predicts a tensor, got {type(values)}"
    predicted = values.tolist()
    errors = [abs(p - t) for p, t in zip(predicted, fresh["price"], strict=True)]
    assert sum(errors) / len(errors) < 60  # the label's std is ~330: predictions are in price units, not z-scores
