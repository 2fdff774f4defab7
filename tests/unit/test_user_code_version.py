"""A team's code reads the dataset version its run was made for: the launcher stages the objects of the
listing the dispatcher wrote (LANDFALL_DATA_FILES), not whatever the folder holds when the job starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.errors import DataError
from trainer.user_code import stage


def folder(root: Path) -> Path:
    data = root / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("x,y\n1,2\n")
    (data / "part-1.csv").write_text("x,y\n3,4\n")  # landed after the version was cut
    return data


def test_the_code_gets_the_versions_objects_only(tmp_path: Path) -> None:
    data = folder(tmp_path)
    listing = tmp_path / "version.jsonl"
    listing.write_text(json.dumps({"name": "part-0.csv", "generation": "", "size": 8}) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    paths = stage({"LANDFALL_DATA_URI": f"{data}/", "LANDFALL_DATA_FILES": str(listing)}, work, mount="/no-mount")
    assert sorted(p.name for p in Path(paths.data_dir).iterdir()) == ["part-0.csv"]
    staged = [json.loads(line) for line in Path(paths.data_files).read_text().splitlines()]
    assert staged == [{"name": "part-0.csv", "generation": "", "size": 8}]


def test_without_a_listing_the_folder_is_listed_now(tmp_path: Path) -> None:
    data = folder(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    paths = stage({"LANDFALL_DATA_URI": f"{data}/"}, work, mount="/no-mount")
    assert sorted(p.name for p in Path(paths.data_dir).iterdir()) == ["part-0.csv", "part-1.csv"]


def test_a_listing_that_is_not_json_lines_is_a_data_error_naming_the_line(tmp_path: Path) -> None:
    data = folder(tmp_path)
    listing = tmp_path / "version.jsonl"
    listing.write_text(json.dumps({"name": "part-0.csv", "generation": "", "size": 8}) + '\n{"name": 1}\n')
    with pytest.raises(DataError, match="line 2"):
        stage({"LANDFALL_DATA_URI": f"{data}/", "LANDFALL_DATA_FILES": str(listing)}, tmp_path, mount="/no-mount")
