"""One rule for what is data in a dataset folder, shared by ingest and the trainer (a
trainer that read `landfall.json` as a shard failed every run with an override, with exit 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from functions.ingest.dataset_names import Role, role_of
from schemas.dataset_layout import MANIFEST, MARKER, OVERRIDES, is_data_object
from trainer.datasets.shards import data_files, relative_name

# (name relative to the dataset folder, is data)
NAMES = [
    ("part-00000.csv", True),
    ("train.parquet", True),
    ("sub/part-1.jsonl", True),
    ("no-extension", True),
    ("landfall.json", False),
    ("_SUCCESS", False),
    ("_MANIFEST.json", False),
    ("sub/landfall.json", False),
    (".hidden", False),
    (".part-0.csv.crc", False),
    ("_temporary/0/part-0.csv", False),
    (".staging/part-0.csv", False),
    ("_logs", False),
    ("sub/", False),
    ("", False),
]


@pytest.mark.parametrize(("name", "expected"), NAMES)
def test_is_data_object(name: str, expected: bool) -> None:
    assert is_data_object(name) is expected


@pytest.mark.parametrize(("name", "expected"), NAMES)
def test_ingest_calls_data_exactly_what_the_shared_rule_does(name: str, expected: bool) -> None:
    assert (role_of(name) == Role.DATA) is expected


def test_control_file_names_are_the_documented_ones() -> None:
    assert (MARKER, MANIFEST, OVERRIDES) == ("_SUCCESS", "_MANIFEST.json", "landfall.json")
    doc = (Path(__file__).resolve().parents[2] / "docs" / "ingest.md").read_text()
    assert all(f"`{name}`" in doc for name in (MARKER, MANIFEST, OVERRIDES))


def _dataset_folder(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "_temporary").mkdir()
    for name in ("part-0.csv", "sub/part-1.csv", "_temporary/part-9.csv", ".hidden"):
        (root / name).write_text("a,label\n1,x\n")
    (root / OVERRIDES).write_text(json.dumps({"hyperparameters": {"epochs": 3}}))
    (root / MARKER).write_text("")
    (root / MANIFEST).write_text(json.dumps({"objects": [{"name": "part-0.csv", "size": 12}]}))
    (root / "sub" / OVERRIDES).write_text("{}")
    return root


def test_trainer_lists_only_data_files(tmp_path: Path) -> None:
    folder = _dataset_folder(tmp_path / "data")
    expected = [str(folder / "part-0.csv"), str(folder / "sub" / "part-1.csv")]
    assert data_files(str(folder)) == expected
    assert data_files(str(folder) + "/") == expected


def test_a_dataset_folder_below_an_underscore_folder_still_has_data(tmp_path: Path) -> None:
    # Only names relative to the dataset folder count: the folder's own path may hold '_' or '.' segments.
    folder = _dataset_folder(tmp_path / "_runs" / ".cache" / "data")
    assert [relative_name(str(folder), f) for f in data_files(str(folder))] == ["part-0.csv", "sub/part-1.csv"]


@pytest.mark.parametrize(
    ("uri", "listed", "relative"),
    [
        ("gs://b/datasets/x/", "gs://b/datasets/x/part-0.csv", "part-0.csv"),
        ("gs://b/datasets/x", "gs://b/datasets/x/_tmp/part-0.csv", "_tmp/part-0.csv"),
        ("gs://b/", "gs://b/landfall.json", "landfall.json"),
        ("gs://b/datasets/x/part-0.csv", "gs://b/datasets/x/part-0.csv", "part-0.csv"),
    ],
)
def test_relative_names_of_cloud_storage_listings(uri: str, listed: str, relative: str) -> None:
    assert relative_name(uri, listed) == relative
