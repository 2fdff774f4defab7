"""Where torch.distributed.checkpoint (DCP) writes and reads a checkpoint's shard files.

Local paths, and /gcs/ paths where Vertex's Cloud Storage FUSE mount exists, go through DCP's own FileSystemWriter
and FileSystemReader. gs:// URIs (and /gcs/ paths without the mount: local runs against the storage emulator) go
through BucketFileSystem: each shard file is streamed to its object by a resumable upload from
google-cloud-storage (trainer/storage.py), so nothing is staged on the local disk, and read back with ranged reads.
DCP's fsspec writer would need gcsfs, which is not among the trainer's requirements; google-cloud-storage already is.
"""

from __future__ import annotations

import io
import os
from collections.abc import Generator
from contextlib import contextmanager
from typing import cast

from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystemBase

from trainer import storage


class BucketFileSystem(FileSystemBase):
    """DCP's file operations on Cloud Storage objects, through trainer/storage.py."""

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[io.IOBase, None, None]:
        uri = os.fspath(path)
        stream = storage.open_write(uri) if "w" in mode else storage.open_read(uri)
        with stream:
            yield cast(io.IOBase, stream)

    def concat_path(self, path: str | os.PathLike[str], suffix: str) -> str:
        return storage.join(os.fspath(path), suffix)

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        storage.rename(os.fspath(path), os.fspath(new_path))

    def init_path(self, path: str | os.PathLike[str]) -> str:
        return os.fspath(path)

    def mkdir(self, path: str | os.PathLike[str]) -> None:
        """Nothing to do: a bucket has no folders."""

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return storage.is_gcs(os.fspath(checkpoint_id))

    def exists(self, path: str | os.PathLike[str]) -> bool:
        return storage.exists(os.fspath(path))

    def rm_file(self, path: str | os.PathLike[str]) -> None:
        storage.delete_file(os.fspath(path))


class BucketWriter(FileSystemWriter):
    """DCP's FileSystemWriter over BucketFileSystem: one shard file per rank, each streamed to its object."""

    def __init__(self, uri: str) -> None:
        # sync_files=False: an object is durable once its upload is finished (the stream closed); there is no file
        # descriptor to fsync.
        super().__init__(uri, single_file_per_rank=True, sync_files=False)
        self.fs = BucketFileSystem()  # type: ignore[assignment]  # DCP types fs as its local FileSystem
        self.path = uri

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return BucketFileSystem.validate_checkpoint_id(checkpoint_id)


class BucketReader(FileSystemReader):
    """DCP's FileSystemReader over BucketFileSystem: each rank reads only the byte ranges its shards need."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.fs = BucketFileSystem()  # type: ignore[assignment]  # DCP types fs as its local FileSystem
        self.path = uri

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return BucketFileSystem.validate_checkpoint_id(checkpoint_id)


def writer(uri: str) -> FileSystemWriter:
    """The DCP writer for a checkpoint folder (gs://, /gcs/ or local)."""
    where = storage.resolve(uri)
    if storage.is_gcs(where):
        return BucketWriter(where)
    return FileSystemWriter(where, single_file_per_rank=True)


def reader(uri: str) -> FileSystemReader:
    """The DCP reader for a checkpoint folder (gs://, /gcs/ or local)."""
    where = storage.resolve(uri)
    if storage.is_gcs(where):
        return BucketReader(where)
    return FileSystemReader(where)
