"""A team's container for the end-to-end promotion test (test_model_promotion.py): the Vertex emulator runs it for
PROMOTION_IMAGE (tests/e2e/conftest.py maps the image with LANDFALL_VERTEX_IMAGES), under its Cloud Storage stand-in,
as Vertex would run the team's entrypoint.

It keeps to the contract only (docs/trainer-contract.md) and the standard library, so a replica starts in a fraction
of a second: it reads the CSV objects listed in LANDFALL_DATA_FILES from LANDFALL_DATA_DIR (columns: features...,
`label`), holds out every fourth row, trains a nearest-centroid classifier (each class's mean feature vector) on the
rest, writes it to LANDFALL_MODEL_DIR/model.json and appends one metrics line with its accuracy on the held-out rows.
When the job names the route's champion (LANDFALL_CHAMPION_MODEL_DIR), it loads that model.json and scores it on the
SAME held-out rows, reporting `champion_accuracy` and `champion_version` (LANDFALL_CHAMPION_MODEL_VERSION); a
champion over other feature columns is not scored (the decision is then not comparable)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

MODEL_FILE = "model.json"
HELD_OUT_EVERY = 4
"""Row i is held out when i % HELD_OUT_EVERY == 0 (the rest trains)."""

Row = tuple[list[float], str]


def read_rows() -> tuple[list[str], list[Row]]:
    """The feature columns and (features, label) of every row, in the listed objects' order."""
    data_dir = Path(os.environ["LANDFALL_DATA_DIR"])
    listing = Path(os.environ["LANDFALL_DATA_FILES"]).read_text().splitlines()
    features: list[str] = []
    rows: list[Row] = []
    for name in sorted(json.loads(line)["name"] for line in listing if line.strip()):
        with open(data_dir / name, newline="") as fh:
            reader = csv.DictReader(fh)
            features = [c for c in reader.fieldnames or [] if c != "label"]
            rows += [([float(r[c]) for c in features], r["label"]) for r in reader]
    return features, rows


def train(features: list[str], rows: list[Row]) -> dict[str, Any]:
    """Each class's centroid over the training rows."""
    sums: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for x, y in rows:
        total = sums.setdefault(y, [0.0] * len(x))
        sums[y] = [s + v for s, v in zip(total, x, strict=True)]
        counts[y] = counts.get(y, 0) + 1
    centroids = {y: [s / counts[y] for s in total] for y, total in sums.items()}
    return {"kind": "nearest-centroid", "features": features, "centroids": centroids}


def accuracy(model: dict[str, Any], rows: list[Row]) -> float:
    """The share of rows whose nearest centroid is their label's."""
    centroids: dict[str, list[float]] = model["centroids"]

    def predict(x: list[float]) -> str:
        return min(centroids, key=lambda y: (sum((a - b) ** 2 for a, b in zip(x, centroids[y], strict=True)), y))

    return sum(predict(x) == y for x, y in rows) / len(rows)


def main() -> int:
    features, rows = read_rows()
    held_out = [r for i, r in enumerate(rows) if i % HELD_OUT_EVERY == 0]
    model = train(features, [r for i, r in enumerate(rows) if i % HELD_OUT_EVERY != 0])
    Path(os.environ["LANDFALL_MODEL_DIR"], MODEL_FILE).write_text(json.dumps(model))
    line: dict[str, object] = {"step": 1, "accuracy": accuracy(model, held_out), "held_out_rows": len(held_out)}
    champion_dir = os.environ.get("LANDFALL_CHAMPION_MODEL_DIR", "")
    if champion_dir:
        champion = json.loads(Path(champion_dir, MODEL_FILE).read_text())
        if champion.get("features") == features:
            line["champion_accuracy"] = accuracy(champion, held_out)
            line["champion_version"] = os.environ.get("LANDFALL_CHAMPION_MODEL_VERSION", "")
    with open(os.environ["LANDFALL_METRICS_FILE"], "a") as metrics:
        metrics.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
