"""The built-in trainer scores the route's champion on its own held-out split (trainer/champion.py): a job naming
LANDFALL_CHAMPION_MODEL_DIR gets metrics.json `champion` measured on the same rows as its own figures; a champion
that reads other columns is skipped with the reason (the promotion decision then says not comparable)."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_runner import run_trainer, trainer_args, trainer_env
from trainer.champion import CHAMPION_DIR_ENV, CHAMPION_VERSION_ENV


def _table(folder: Path, rows: int, seed: int, columns: tuple[str, ...] = ("a", "b")) -> str:
    """A separable table: label 1 when the first column exceeds the second."""
    folder.mkdir(parents=True)
    rng = random.Random(seed)
    with open(folder / "part-0.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*columns, "label"])
        for _ in range(rows):
            a, b = rng.uniform(-1, 1), rng.uniform(-1, 1)
            writer.writerow([a, b, int(a > b)])
    return f"{folder}/"


def _train(data: str, model_dir: Path, *extra: str, **env: str) -> dict[str, Any]:
    run = run_trainer(
        trainer_args(data, epochs=4, extra=("--hparam", "val_fraction=0.25", *extra)),
        trainer_env(AIP_MODEL_DIR=str(model_dir), **env),
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return dict(json.loads((model_dir / "metrics.json").read_text()))


@pytest.fixture(scope="module")
def weak_champion(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One step on columns a, b: the champion both tests score (one trainer run shared)."""
    root = tmp_path_factory.mktemp("champion")
    weak = _train(_table(root / "v1", 200, 1), root / "m1", "--max-steps=1")
    assert "champion" not in weak, "no champion named, none scored"
    return root / "m1"


def test_the_champion_is_scored_on_the_challengers_held_out_rows(tmp_path: Path, weak_champion: Path) -> None:
    metrics = _train(
        _table(tmp_path / "v2", 400, 2),
        tmp_path / "m2",
        **{CHAMPION_DIR_ENV: str(weak_champion), CHAMPION_VERSION_ENV: "projects/p/locations/l/models/m@1"},
    )
    champion = metrics["champion"]
    assert champion["version"] == "projects/p/locations/l/models/m@1"
    assert champion["samples"] == metrics["evaluation"]["samples"], "the same held-out rows"
    assert champion["final"]["accuracy"] < metrics["final"]["accuracy"], (champion, metrics["final"])


def test_a_champion_reading_other_columns_is_skipped_with_the_reason(tmp_path: Path, weak_champion: Path) -> None:
    metrics = _train(
        _table(tmp_path / "v2", 120, 2, ("x", "y")), tmp_path / "m2", **{CHAMPION_DIR_ENV: str(weak_champion)}
    )
    assert "other feature columns" in metrics["champion"]["skipped"]
    assert "final" not in metrics["champion"]
