"""`python -m trainer.task` on a dataset folder as ingest sees it: control files beside the shards (not data),
text class labels, statistics and the held-out split the same on every rank, and load_model mapping back."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.trainer_runner import run_trainer, trainer_args, trainer_env
from trainer.datasets.shards import is_validation

LABELS = ("benign", "malignant")


def _rows(n: int, seed: int, labels: tuple[str, ...] = LABELS) -> list[tuple[float, float, float, str]]:
    """(a, b, c, label): label = labels[a + 2b > 0.5], c noise on another scale."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, c = rng.gauss(0, 1), rng.gauss(0, 1), rng.gauss(50, 20)
        out.append((a, b, c, labels[int(a + 2 * b > 0.5)]))
    return out


def _write(folder: Path, shards: list[list[tuple[float, float, float, str]]]) -> Path:
    folder.mkdir(parents=True)
    for i, rows in enumerate(shards):
        lines = ["a,b,c,diagnosis"] + [f"{a:.5f},{b:.5f},{c:.3f},{y}" for a, b, c, y in rows]
        (folder / f"part-{i}.csv").write_text("\n".join(lines) + "\n")
    # What a dataset folder holds beside the data; none of it is a shard.
    (folder / "landfall.json").write_text(json.dumps({"hyperparameters": {"epochs": 3}}))
    (folder / "_SUCCESS").write_text("")
    (folder / "_MANIFEST.json").write_text(json.dumps({"objects": [{"name": "part-0.csv", "size": 1}]}))
    (folder / ".hidden").write_text("not,data\n")
    return folder


def _train(data: Path, model_dir: Path, nproc: int = 1, epochs: int = 3) -> dict:
    env = trainer_env(AIP_MODEL_DIR=str(model_dir), LANDFALL_NPROC_PER_NODE=str(nproc))
    run = run_trainer(
        trainer_args(f"{data}/", epochs=epochs, seed=3, extra=("--label-column=diagnosis",)), env, timeout=180
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return dict(json.loads((model_dir / "metrics.json").read_text()))


def test_text_labels_beside_control_files_train_and_predict_labels(tmp_path: Path) -> None:
    rows = _rows(600, seed=0)
    data = _write(tmp_path / "data", [rows])
    metrics = _train(data, tmp_path / "model")

    held_out = [i for i in range(len(rows)) if is_validation(0, i, 0.1)]
    assert metrics["evaluation"] == {
        "split": "held-out",
        "samples": len(held_out),
        "train_samples": len(rows) - len(held_out),
        "val_fraction": 0.1,
    }
    assert metrics["final"]["accuracy"] >= 0.9

    from trainer.model_io import load_model

    loaded = load_model(str(tmp_path / "model"))
    assert loaded.classes == ["benign", "malignant"]
    assert loaded.config["data"]["feature_names"] == ["a", "b", "c"]
    fresh = _rows(300, seed=99)
    predicted = loaded.predict([list(r[:3]) for r in fresh])
    assert isinstance(predicted, list) and set(predicted) <= set(LABELS)
    assert sum(p == r[3] for p, r in zip(predicted, fresh, strict=True)) / len(fresh) >= 0.9
    assert loaded.predict_ids([list(fresh[0][:3])]).tolist() == [LABELS.index(predicted[0])]
    # The standardisation saved with the model is the training split's (held-out rows excluded).
    train_c = [rows[i][2] for i in range(len(rows)) if i not in set(held_out)]
    assert loaded.config["data"]["feature_mean"][2] == pytest.approx(sum(train_c) / len(train_c), rel=1e-6)


def test_two_processes_agree_on_classes_statistics_and_the_held_out_split(tmp_path: Path) -> None:
    # Each rank reads one shard, and each shard lacks one class: the classes must still be the union, in order.
    shards = [_rows(300, seed=1, labels=("a", "b")), _rows(300, seed=2, labels=("b", "c"))]
    data = _write(tmp_path / "data", shards)
    one = _train(data, tmp_path / "one", nproc=1, epochs=1)
    two = _train(data, tmp_path / "two", nproc=2, epochs=1)
    assert two["world_size"] == 2 and one["evaluation"] == two["evaluation"]
    configs = [json.loads((tmp_path / name / "config.json").read_text())["data"] for name in ("one", "two")]
    assert configs[0]["classes"] == configs[1]["classes"] == ["a", "b", "c"]
    for key in ("feature_mean", "feature_std"):
        assert configs[1][key] == pytest.approx(configs[0][key], rel=1e-9)
