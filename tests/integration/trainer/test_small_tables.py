"""Small tables under the shipped routes: the trainer command line a dataset landing under
datasets/ or regression/ gets (route template -> dispatcher's job_spec, as bench/tabular_bench.py builds it), run
as `python -m trainer.task` on a CPU. On iris the default route used to take 10 optimizer steps and score 15
held-out rows; now it takes min_steps, holds out 30, and a table too small to hold out 30 says so on the run."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from bench.tabular_bench import Table, route_args
from functions.ingest.routes import ROUTES_FILE
from schemas.run_metrics import run_warnings, task_figures
from schemas.trainer_flags import HparamValues
from tests.trainer_runner import run_trainer, trainer_env
from trainer.datasets.shards import is_validation

DEFAULTS = HparamValues()


def _iris() -> Table:
    from sklearn.datasets import load_iris

    data = load_iris()
    return Table(
        "iris",
        [str(f) for f in data.feature_names],
        data.data.tolist(),
        [str(data.target_names[t]) for t in data.target],
    )


def _train(table: Table, rows: list[int], tmp: Path, batch: int = 64) -> tuple[dict[str, Any], Path]:
    """Write the rows as one CSV and train with the route's command line (its batch of 64 replaced by `batch`, as
    a landfall.json of {"hyperparameters": {"batch_size": N}} would); metrics.json and the model dir."""
    folder, model_dir = tmp / table.name, tmp / f"{table.name}-model"
    folder.mkdir()
    with open(folder / "part-0.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*table.features, "label"])
        writer.writerows([*table.rows[i], table.labels[i]] for i in rows)
    replaced = {"--data-uri": f"{folder}/", "--batch-size": str(batch), "--micro-batch-size": str(batch)}
    args = [
        f"{a.split('=')[0]}={replaced[a.split('=')[0]]}" if a.split("=")[0] in replaced else a
        for a in route_args(table, ROUTES_FILE)
    ]
    run = run_trainer(args, trainer_env(AIP_MODEL_DIR=str(model_dir)), timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return dict(json.loads((model_dir / "metrics.json").read_text())), model_dir


def test_iris_under_the_default_route_trains_enough_steps_on_a_held_out_set_that_means_something(
    tmp_path: Path,
) -> None:
    iris = _iris()
    metrics, model_dir = _train(iris, list(range(150)), tmp_path)
    evaluation = metrics["evaluation"]
    held = [i for i in range(150) if is_validation(0, i, evaluation["val_fraction"])]
    # min_held_out grew the share from 10 % (15 rows) to hold out about 30 rows
    assert evaluation["val_fraction"] == DEFAULTS.min_held_out / 150
    assert evaluation["samples"] == len(held) >= 25
    # 120 training rows at the route's batch of 64 are one step an epoch: the epochs were raised to min_steps
    assert metrics["steps"] >= DEFAULTS.min_steps and len(metrics["epochs"]) >= DEFAULTS.min_steps
    early = metrics["early_stopping"]
    assert metrics["final"]["loss"] == early["best_loss"] == min(e["loss"] for e in metrics["epochs"])
    # the saved weights are the best epoch's: they score what metrics.json says
    from trainer.model_io import load_model

    predicted = load_model(str(model_dir)).predict([iris.rows[i] for i in held])
    accuracy = sum(p == iris.labels[i] for p, i in zip(predicted, held, strict=True)) / len(held)
    assert accuracy == metrics["final"]["accuracy"] >= 0.9
    if len(held) >= DEFAULTS.min_held_out:
        assert run_warnings(metrics) == ()


def test_a_table_too_small_to_hold_out_enough_rows_trains_and_says_so_on_the_run(tmp_path: Path) -> None:
    iris = _iris()
    # 70 rows of three classes; fewer training rows than the route's batch of 64, so a batch of 16
    metrics, _ = _train(iris, [i for i in range(150) if i % 2 == 0][:70], tmp_path, batch=16)
    assert metrics["evaluation"]["val_fraction"] == 0.3  # the cap: the rest stays for training
    assert metrics["evaluation"]["samples"] < DEFAULTS.min_held_out
    assert metrics["steps"] >= DEFAULTS.min_steps
    (warning,) = run_warnings(metrics)
    assert warning.code == "small-held-out" and f"{metrics['evaluation']['samples']} rows" in warning.message


def test_regression_under_the_regression_route_reports_r2_and_rmse_that_the_saved_model_reproduces(
    tmp_path: Path,
) -> None:
    from sklearn.datasets import load_diabetes

    data = load_diabetes(scaled=False)
    table = Table(
        "diabetes",
        [str(f) for f in data.feature_names],
        data.data.tolist()[:200],
        [float(v) for v in data.target][:200],
        regression=True,
    )
    metrics, model_dir = _train(table, list(range(200)), tmp_path)
    assert metrics["task"] == "tabular-regression"
    held = [i for i in range(200) if is_validation(0, i, metrics["evaluation"]["val_fraction"])]
    from trainer.model_io import load_model

    predicted = load_model(str(model_dir)).predict([table.rows[i] for i in held])
    assert not isinstance(predicted, list)  # regression: a tensor of numbers
    truth = [float(table.labels[i]) for i in held]
    errors = [(t - float(p)) ** 2 for t, p in zip(truth, predicted.tolist(), strict=True)]
    mean = sum(truth) / len(truth)
    r2 = 1 - sum(errors) / sum((t - mean) ** 2 for t in truth)
    rmse = math.sqrt(sum(errors) / len(errors))
    final = metrics["final"]
    assert abs(final["r2"] - r2) < 1e-3 and abs(final["rmse"] - rmse) < 1e-2 * rmse
    assert final["r2"] > 0.2  # a real fit, not the mean
    assert dict(task_figures("tabular-regression", metrics)) == {"R²": final["r2"], "RMSE": final["rmse"]}
