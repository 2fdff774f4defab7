"""Tabular benchmark: Landfall's routes against scikit-learn's scaled linear models, on the public tables a user
tries first.

    .venv/bin/python bench/tabular_bench.py [--splits 5] [--dataset iris ...] [--json]

Datasets that scikit-learn ships (nothing is downloaded): classification under the default route (datasets/)
against StandardScaler + LogisticRegression: Iris (150 rows, 4 features, 3 classes), Wine (178, 13, 3), Breast
Cancer Wisconsin (569, 30, 2) and Digits (1,797, 64, 10), labels written as text as a user's export would hold
them; regression under the regression route (regression/) against StandardScaler + RidgeCV: Diabetes (442 rows,
10 features, a disease-progression score).

Landfall's side is what a dataset landing under the route gets: the request comes from the route's template in
deploy/routes.toml (functions/ingest/readiness.template), the trainer's command line from the dispatcher's own
builder (functions/dispatch/job_spec.trainer_args), and the run is `python -m trainer.task` in a subprocess. Its
figure is metrics.json's, on the rows the trainer holds out (the share metrics.json's evaluation.val_fraction
names, which min_held_out grows on small tables; rows chosen by trainer.datasets.shards.is_validation); the
baseline is fitted on the other rows and scored on exactly those.

One split holds out only 30-60 rows on the small tables, so one row is 2-3 points. Each dataset is therefore run
over --splits row orders (a different held-out set each) and the verdict is on the pooled held-out rows: Landfall
passes when its accuracy is at most one point below the baseline's, or its R² at most 0.02 below. Exit status 1
when it is not.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deploy.routes import read_routes  # noqa: E402
from functions.dispatch.job_spec import trainer_args  # noqa: E402
from functions.ingest.readiness import Completion, Scan, template  # noqa: E402
from functions.ingest.routes import ROUTES_FILE, route_for  # noqa: E402
from schemas.plan import Plan, parse_plan  # noqa: E402
from schemas.training_request import TrainingRequest  # noqa: E402
from trainer.config import parse_args  # noqa: E402
from trainer.datasets.shards import is_validation  # noqa: E402

BUCKET = "bench-landing"
TOLERANCE = {"accuracy": 0.01, "r2": 0.02}
"""How far below the baseline Landfall may be: one point of accuracy, 0.02 of R²."""


@dataclass(frozen=True)
class Table:
    name: str
    features: list[str]
    rows: list[list[float]]
    labels: list[str] | list[float]
    regression: bool = False

    @property
    def figure(self) -> str:
        return "r2" if self.regression else "accuracy"

    @property
    def folder(self) -> str:
        """The route prefix this table lands under."""
        return "regression/" if self.regression else "datasets/"


def load_tables() -> list[Table]:
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_iris, load_wine

    out = []
    for name, loader in (
        ("iris", load_iris),
        ("wine", load_wine),
        ("breast-cancer", load_breast_cancer),
        ("digits", load_digits),
    ):
        data = loader()
        out.append(
            Table(
                name,
                [str(f) for f in data.feature_names],
                data.data.tolist(),
                [str(data.target_names[t]) for t in data.target],
            )
        )
    diabetes = load_diabetes(scaled=False)
    out.append(
        Table(
            "diabetes",
            [str(f) for f in diabetes.feature_names],
            diabetes.data.tolist(),
            [float(v) for v in diabetes.target],
            regression=True,
        )
    )
    return out


def route_args(table: Table, routes_file: Traversable) -> list[str]:
    """The trainer command line a dataset landing at gs://BENCH/<route prefix>/NAME/ gets from its route."""
    dataset = table.name
    route = route_for(BUCKET, f"{table.folder}{dataset}/part-0.csv", read_routes(routes_file))
    assert route is not None, f"{routes_file} has no route for {table.folder}"
    completion = Completion(
        bucket=BUCKET,
        prefix=f"{table.folder}{dataset}/",
        route=route,
        kind="marker",
        object_name=f"{table.folder}{dataset}/_SUCCESS",
        generation="1",
    )
    request = template(completion, Scan(count=1, total_bytes=1, formats={"csv"}), datetime.now(UTC))
    # the bench writes its own local files: the version's object list (--data-objects / --data-digest, which the
    # listing above did not fill) is left out, so the trainer reads the folder it is pointed at
    args = trainer_args(request, one_process_plan(request))
    return [a for a in args if not a.startswith(("--data-digest=", "--data-objects="))]


def one_process_plan(request: TrainingRequest) -> Plan:
    """The plan of this bench's local run: one process on a CPU machine (schemas/examples/plan_cpu.json), the whole
    batch in one micro-batch, DDP, precision auto (the trainer picks fp32 on a CPU)."""
    example = parse_plan(json.loads((REPO / "schemas" / "examples" / "plan_cpu.json").read_text()))
    batch = request.hyperparameters.batch_size
    return replace(
        example,
        strategy="ddp",
        precision="auto",
        global_batch_size=batch,
        micro_batch_size=batch,
        gradient_accumulation_steps=1,
        activation_checkpointing=False,
    )


def write_split(table: Table, order: list[int], folder: Path) -> None:
    folder.mkdir(parents=True)
    with open(folder / "part-0.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*table.features, "label"])
        for i in order:
            writer.writerow([*table.rows[i], table.labels[i]])
    (folder / "_SUCCESS").write_text("")


def run_landfall(args: list[str], folder: Path, model_dir: Path) -> dict[str, Any]:
    argv = [a if not a.startswith("--data-uri=") else f"--data-uri={folder}/" for a in args]
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
            "CLUSTER_SPEC",
            "LANDFALL_NPROC_PER_NODE",
            "AIP_CHECKPOINT_DIR",
            "AIP_TENSORBOARD_LOG_DIR",
        )
    }
    env.update(PYTHONPATH=str(REPO), AIP_MODEL_DIR=str(model_dir), OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"))
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.task", *argv], env=env, cwd=REPO, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"trainer failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return dict(json.loads((model_dir / "metrics.json").read_text()))


def figure(table: Table, held_out: list[int], predicted: list[Any]) -> float:
    """Accuracy, or R² of the held-out targets about their own mean."""
    truth = [table.labels[i] for i in held_out]
    if not table.regression:
        return sum(bool(p == t) for p, t in zip(predicted, truth, strict=True)) / len(truth)
    return r2_of([float(t) for t in truth], [float(p) for p in predicted])


def r2_of(truth: list[float], predicted: list[float]) -> float:
    mean = sum(truth) / len(truth)
    spread = sum((t - mean) ** 2 for t in truth)
    return 1.0 - sum((t - p) ** 2 for t, p in zip(truth, predicted, strict=True)) / spread


def loaded_predictions(table: Table, held_out: list[int], model_dir: Path) -> list[Any]:
    from trainer.model_io import load_model

    predicted = load_model(str(model_dir)).predict([table.rows[i] for i in held_out])
    if isinstance(predicted, list):  # text labels
        return predicted
    if table.regression:
        return [float(v) for v in predicted.tolist()]
    # integer labels (digits' "0".."9" read back as integers): compared as the text the CSV held
    return [str(int(v)) for v in predicted.tolist()]


def baseline_predictions(table: Table, train: list[int], held_out: list[int]) -> list[Any]:
    """scikit-learn's scaled linear model: LogisticRegression, or RidgeCV (its alpha chosen by leave-one-out on the
    training rows) for regression."""
    from sklearn.linear_model import LogisticRegression, RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    linear = RidgeCV(alphas=[0.01, 0.1, 1.0, 10.0, 100.0]) if table.regression else LogisticRegression(max_iter=10_000)
    model = make_pipeline(StandardScaler(), linear)
    model.fit([table.rows[i] for i in train], [table.labels[i] for i in train])
    return list(model.predict([table.rows[i] for i in held_out]))


def bench_table(table: Table, splits: int, workdir: Path, routes_file: Traversable) -> dict[str, Any]:
    args = route_args(table, routes_file)
    assert parse_args(args).task == ("tabular-regression" if table.regression else "tabular-classification")
    results, pooled_truth = [], []
    pooled: dict[str, list[Any]] = {"landfall": [], "baseline": []}
    for split in range(splits):
        order = list(range(len(table.rows)))
        if split:
            random.Random(split).shuffle(order)  # split 0 is the file as scikit-learn ships it
        folder = workdir / f"{table.name}-{split}"
        write_split(table, order, folder)
        model_dir = workdir / f"{table.name}-{split}-model"
        metrics = run_landfall(args, folder, model_dir)
        evaluation = metrics["evaluation"]
        val_fraction = evaluation["val_fraction"]  # the share the trainer held out (min_held_out may raise it)
        held = [order[i] for i in range(len(order)) if is_validation(0, i, val_fraction)]
        train = [order[i] for i in range(len(order)) if not is_validation(0, i, val_fraction)]
        assert evaluation["split"] == "held-out" and evaluation["samples"] == len(held), evaluation
        landfall = loaded_predictions(table, held, model_dir)
        # The same figure from the saved model (standardisation and labels applied by load_model): the trainer
        # scored exactly these rows.
        stated, from_model = metrics["final"][table.figure], figure(table, held, landfall)
        assert abs(from_model - stated) < 1e-4, f"load_model scores {from_model}, metrics.json says {stated}"
        baseline = baseline_predictions(table, train, held)
        pooled["landfall"] += landfall
        pooled["baseline"] += baseline
        pooled_truth += held
        print(
            f"{table.name} split {split}: landfall {stated:.4f}, baseline {figure(table, held, baseline):.4f}",
            file=sys.stderr,
            flush=True,
        )
        results.append(
            {
                "split": split,
                "held_out": len(held),
                "train": len(train),
                "steps": metrics["steps"],
                "epochs": len(metrics["epochs"]),
                "landfall": stated,
                "baseline": figure(table, held, baseline),
                "warnings": [w["code"] for w in metrics["warnings"]],
            }
        )
    totals = {side: figure(table, pooled_truth, pooled[side]) for side in ("landfall", "baseline")}
    return {
        "dataset": table.name,
        "rows": len(table.rows),
        "features": len(table.features),
        "figure": table.figure,
        "classes": None if table.regression else len(set(table.labels)),
        "args": args,
        "splits": results,
        "held_out_rows": len(pooled_truth),
        **totals,
        "ok": totals["landfall"] >= totals["baseline"] - TOLERANCE[table.figure] - 1e-12,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=5, help="row orders (held-out sets) per dataset")
    parser.add_argument(
        "--dataset", action="append", help="only this dataset (iris, wine, breast-cancer, digits, diabetes); repeatable"
    )
    parser.add_argument("--routes", type=Path, default=ROUTES_FILE, help="routes file (default deploy/routes.toml)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    ns = parser.parse_args()
    tables = [t for t in load_tables() if not ns.dataset or t.name in ns.dataset]
    if not tables:
        parser.error(f"--dataset: expected one of {', '.join(t.name for t in load_tables())}")
    with tempfile.TemporaryDirectory(prefix="landfall-tabular-bench-") as tmp:
        reports = [bench_table(table, ns.splits, Path(tmp), ns.routes) for table in tables]
    if ns.json:
        print(json.dumps(reports, indent=2))
        return 0 if all(r["ok"] for r in reports) else 1
    for r in reports:
        print(f"{r['dataset']}: " + " ".join(a for a in r["args"] if not a.startswith("--data-uri")))
    print(
        "vs scikit-learn StandardScaler + LogisticRegression(max_iter=10000) (accuracy) or + RidgeCV (R²), same "
        "training and held-out rows\n"
    )
    print(
        f"{'dataset':<14} {'figure':<8} {'split':>5} {'held-out':>8} {'train':>6} {'steps':>5} {'epochs':>6} "
        f"{'landfall':>9} {'sklearn':>8}  warnings"
    )
    for r in reports:
        for s in r["splits"]:
            print(
                f"{r['dataset']:<14} {r['figure']:<8} {s['split']:>5} {s['held_out']:>8} {s['train']:>6} "
                f"{s['steps']:>5} {s['epochs']:>6} {s['landfall']:>9.4f} {s['baseline']:>8.4f}  "
                f"{','.join(s['warnings'])}"
            )
        verdict = "ok" if r["ok"] else f"FAIL: more than {TOLERANCE[r['figure']]} below"
        print(
            f"{r['dataset']:<14} {r['figure']:<8} {'all':>5} {r['held_out_rows']:>8} {'':>6} {'':>5} {'':>6} "
            f"{r['landfall']:>9.4f} {r['baseline']:>8.4f}  {verdict}\n"
        )
    return 0 if all(r["ok"] for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
