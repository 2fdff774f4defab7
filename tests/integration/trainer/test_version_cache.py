"""One generation of an object is read from Cloud Storage once per node: with LANDFALL_DATA_CACHE_DIR (the launcher
sets it) trainer/storage.py downloads it into that folder on first open, and every epoch after reads the copy.
Against fake-gcs-server through google-cloud-storage."""

from __future__ import annotations

import shutil
import uuid
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest

from tests import datagen
from trainer import storage
from trainer.datasets.tables import read_rows, read_schema
from trainer.errors import DataError


@pytest.fixture()
def bucket(gcs_emulator: Any) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    client = gcs.Client(project="landfall-local", credentials=AnonymousCredentials())
    created = client.create_bucket(f"cache-{uuid.uuid4().hex[:10]}")
    created.versioning_enabled = True  # keeps a generation after its object is rewritten
    created.patch()
    return created


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    folder.mkdir()
    monkeypatch.setenv(storage.DATA_CACHE_ENV, str(folder))
    return folder


def _upload(bucket: Any, name: str, data: bytes) -> str:
    blob = bucket.blob(name)
    blob.upload_from_string(data, content_type="text/csv")
    return storage.versioned(f"gs://{bucket.name}/{name}", str(blob.generation))


def test_a_generation_is_downloaded_once_and_read_from_the_copy_after_its_object_changes(
    bucket: Any, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = datagen.csv_text(datagen.separable_rows(2000, 0)).encode()
    uri = _upload(bucket, "d/part-0.csv", first)
    with storage.open_read(uri) as fh:
        assert fh.read() == first
    assert [p.stat().st_size for p in cache.iterdir()] == [len(first)]  # whole, under its final name
    _upload(bucket, "d/part-0.csv", b"x,label\n1,0\n")  # the live object is another generation now

    def no_requests() -> None:
        raise AssertionError("a cached generation was requested from Cloud Storage again")

    monkeypatch.setattr(storage, "client", no_requests)
    with storage.open_read(uri) as fh:  # the recorded generation's bytes, from the copy
        assert fh.read() == first


def test_a_gone_generation_fails_naming_it_and_leaves_nothing_in_the_folder(bucket: Any, cache: Path) -> None:
    bucket.versioning_enabled = False  # a rewrite replaces the recorded generation
    bucket.patch()
    uri = _upload(bucket, "d/part-0.csv", b"x,label\n1,0\n")
    _upload(bucket, "d/part-0.csv", b"x,label\n2,1\n")
    with pytest.raises(DataError, match="this generation no longer exists"):
        storage.open_read(uri)
    assert list(cache.iterdir()) == []


def test_an_object_larger_than_half_the_free_space_is_streamed(
    bucket: Any, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = datagen.csv_text(datagen.separable_rows(500, 0)).encode()
    uri = _upload(bucket, "d/part-0.csv", data)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: usage(2 * len(data), len(data), 2 * len(data) - 2))
    with storage.open_read(uri) as fh:
        assert fh.read() == data
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("cached", [True, False], ids=["copy", "streamed"])
def test_a_shard_of_megabytes_reads_line_by_line_from_either_path(
    bucket: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    """Lines come from a buffer whether the shard is a local copy or streamed (a BlobReader alone hands io's
    readline one byte per call)."""
    if cached:
        (tmp_path / "c").mkdir()
        monkeypatch.setenv(storage.DATA_CACHE_ENV, str(tmp_path / "c"))
    else:
        monkeypatch.delenv(storage.DATA_CACHE_ENV, raising=False)
    rows = datagen.separable_rows(130_000, 3)
    text = datagen.csv_text(rows)
    assert len(text) > 3 * 1024 * 1024
    uri = _upload(bucket, "big/part-0.csv", text.encode())
    schema = read_schema(uri, "csv", "label", class_labels=True)
    read = list(read_rows(uri, "csv", schema))
    assert len(read) == len(rows) and read[-1][0] == len(rows) + 1  # line numbers count the header
    assert len(list((tmp_path / "c").iterdir()) if cached else []) == (1 if cached else 0)
