"""Tabular benchmark: Landfall's default route model against scikit-learn's StandardScaler + LogisticRegression.

    .venv/bin/python bench/tabular_bench.py [--splits 5] [--json]

Two public datasets that scikit-learn ships (nothing is downloaded): Breast Cancer Wisconsin (569 rows, 30
features, labels "malignant"/"benign") and Wine (178 rows, 13 features, labels "class_0".."class_2"). Labels are
written as text, as a user's export would hold them.

Landfall's side is what a dataset landing under the default route gets: the request comes from the route's
template in deploy/routes.toml (functions/ingest/readiness.template), the trainer's command line from the
dispatcher's own builder (functions/dispatch/job_spec.trainer_args), and the run is `python -m trainer.task` in a
subprocess. Its accuracy is metrics.json's, on the rows the trainer holds out (--hparam val_fraction, chosen by
trainer.datasets.shards.is_validation); the baseline is fitted on the other rows and scored on exactly those.

One split holds out only ~57 (Breast Cancer) or ~18 (Wine) rows, so one row is 1.8 or 5.6 points. Each dataset is
therefore run over --splits row orders (a different held-out set each) and the verdict is on the pooled held-out
rows: Landfall passes when it is at most one point below the baseline. Exit status 1 when it is not.
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from functions.dispatch.job_spec import trainer_args  # noqa: E402
from functions.ingest.readiness import Completion, Scan, template  # noqa: E402
from functions.ingest.routes import ROUTES_FILE, load_routes, route_for  # noqa: E402
from schemas.plan import Plan, parse_plan  # noqa: E402
from schemas.training_request import TrainingRequest  # noqa: E402
from trainer.config import parse_args  # noqa: E402
from trainer.datasets.shards import is_validation  # noqa: E402

BUCKET = "bench-landing"
TOLERANCE = 0.01
"""Landfall may be at most one point (0.01) below the baseline."""


@dataclass(frozen=True)
class Table:
    name: str
    features: list[str]
    rows: list[list[float]]
    labels: list[str]


def load_tables() -> list[Table]:
    from sklearn.datasets import load_breast_cancer, load_wine

    out = []
    for name, loader in (("breast-cancer", load_breast_cancer), ("wine", load_wine)):
        data = loader()
        out.append(
            Table(
                name,
                [str(f) for f in data.feature_names],
                data.data.tolist(),
                [str(data.target_names[t]) for t in data.target],
            )
        )
    return out


def default_route_args(dataset: str, routes_file: Path) -> list[str]:
    """The trainer command line a dataset landing at gs://BENCH/datasets/NAME/ gets from the default route."""
    route = route_for(BUCKET, f"datasets/{dataset}/part-0.csv", load_routes(routes_file))
    assert route is not None, f"{routes_file} has no route for datasets/"
    completion = Completion(
        bucket=BUCKET,
        prefix=f"datasets/{dataset}/",
        route=route,
        kind="marker",
        object_name=f"datasets/{dataset}/_SUCCESS",
        generation="1",
    )
    request = template(completion, Scan(count=1, total_bytes=1, formats={"csv"}), datetime.now(UTC))
    return trainer_args(request, one_process_plan(request))


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


def loaded_accuracy(table: Table, held_out: list[int], model_dir: Path) -> float:
    from trainer.model_io import load_model

    predicted = load_model(str(model_dir)).predict([table.rows[i] for i in held_out])
    assert isinstance(predicted, list)
    return sum(p == table.labels[i] for p, i in zip(predicted, held_out, strict=True)) / len(held_out)


def baseline_accuracy(table: Table, train: list[int], held_out: list[int]) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=10_000))
    model.fit([table.rows[i] for i in train], [table.labels[i] for i in train])
    return float(model.score([table.rows[i] for i in held_out], [table.labels[i] for i in held_out]))


def bench_table(table: Table, splits: int, workdir: Path, routes_file: Path) -> dict[str, Any]:
    args = default_route_args(table.name, routes_file)
    val_fraction = parse_args(args).hparams.val_fraction
    results = []
    for split in range(splits):
        order = list(range(len(table.rows)))
        if split:
            random.Random(split).shuffle(order)  # split 0 is the file as scikit-learn ships it
        held = [order[i] for i in range(len(order)) if is_validation(0, i, val_fraction)]
        train = [order[i] for i in range(len(order)) if not is_validation(0, i, val_fraction)]
        folder = workdir / f"{table.name}-{split}"
        write_split(table, order, folder)
        model_dir = workdir / f"{table.name}-{split}-model"
        metrics = run_landfall(args, folder, model_dir)
        evaluation = metrics["evaluation"]
        assert evaluation["split"] == "held-out" and evaluation["samples"] == len(held), evaluation
        accuracy = metrics["final"]["accuracy"]
        # The same figure from the saved model (standardisation and labels applied by load_model): the trainer
        # scored exactly these rows.
        from_model = loaded_accuracy(table, held, model_dir)
        assert abs(from_model - accuracy) < 1e-9, f"load_model scores {from_model}, metrics.json says {accuracy}"
        results.append(
            {
                "split": split,
                "held_out": len(held),
                "train": len(train),
                "landfall": accuracy,
                "baseline": baseline_accuracy(table, train, held),
            }
        )
    rows = sum(r["held_out"] for r in results)
    pooled = {side: sum(r[side] * r["held_out"] for r in results) / rows for side in ("landfall", "baseline")}
    return {
        "dataset": table.name,
        "rows": len(table.rows),
        "features": len(table.features),
        "classes": len(set(table.labels)),
        "args": args,
        "splits": results,
        "held_out_rows": rows,
        **pooled,
        "ok": pooled["landfall"] >= pooled["baseline"] - TOLERANCE - 1e-12,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=5, help="row orders (held-out sets) per dataset")
    parser.add_argument("--dataset", action="append", help="only this dataset (breast-cancer, wine); repeatable")
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
    print("Landfall default route " + " ".join(a for a in reports[0]["args"] if not a.startswith("--data-uri")))
    print("vs scikit-learn StandardScaler + LogisticRegression(max_iter=10000), same training and held-out rows\n")
    print(f"{'dataset':<14} {'split':>5} {'held-out':>8} {'train':>6} {'landfall':>9} {'sklearn':>8}")
    for r in reports:
        for s in r["splits"]:
            print(
                f"{r['dataset']:<14} {s['split']:>5} {s['held_out']:>8} {s['train']:>6} {s['landfall']:>9.4f} "
                f"{s['baseline']:>8.4f}"
            )
        verdict = "ok" if r["ok"] else f"FAIL: more than {TOLERANCE * 100:.0f} point below"
        print(
            f"{r['dataset']:<14} {'all':>5} {r['held_out_rows']:>8} {'':>6} {r['landfall']:>9.4f} "
            f"{r['baseline']:>8.4f}  {verdict}\n"
        )
    return 0 if all(r["ok"] for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
