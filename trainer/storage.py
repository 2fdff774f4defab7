"""Reading and writing gs:// URIs, /gcs/ paths and local paths through one small interface.

gs:// goes through google-cloud-storage, which honours STORAGE_EMULATOR_HOST (fake-gcs-server locally; the client
then uses anonymous credentials). The client is created lazily, once per process, with the project from
GOOGLE_CLOUD_PROJECT (or CLOUD_ML_PROJECT_ID on Vertex). A /gcs/BUCKET/... path is Vertex's Cloud Storage FUSE
mount: it is read as a local file where the mount exists, and as gs://BUCKET/... where it does not (local runs).
"""

from __future__ import annotations

import io
import os
import shutil
from functools import cache
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from google.cloud import storage

_READ_CHUNK = 8 * 1024 * 1024
_LINE_BUFFER = 256 * 1024
"""What a BufferedReader over a Cloud Storage object asks of it at a time (served from its _READ_CHUNK download)."""


def resolve(uri: str) -> str:
    """gs:// URIs and local paths unchanged; /gcs/B/P becomes gs://B/P when no FUSE mount is present."""
    if uri.startswith("/gcs/") and not os.path.isdir("/gcs"):
        return "gs://" + uri[len("/gcs/") :]
    return uri


def is_gcs(uri: str) -> bool:
    return resolve(uri).startswith("gs://")


def join(base: str, *names: str) -> str:
    """base/names with exactly one slash between parts, for URIs and paths alike."""
    out = base
    for name in names:
        out = out.rstrip("/") + "/" + name.lstrip("/")
    return out


def split_gcs(uri: str) -> tuple[str, str]:
    """gs://bucket/some/name -> ('bucket', 'some/name')."""
    rest = resolve(uri)[len("gs://") :]
    bucket, _, name = rest.partition("/")
    if not bucket:
        raise ValueError(f"{uri!r}: expected gs://BUCKET/NAME")
    return bucket, name


def client() -> storage.Client:
    """The process's storage client; anonymous against the emulator (STORAGE_EMULATOR_HOST).

    One client per endpoint and project, read from the environment at each call: a process (a notebook, a test
    session) that points STORAGE_EMULATOR_HOST elsewhere gets a client for where it points now.
    """
    project = os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUD_ML_PROJECT_ID") or ""
    return _client_for(os.environ.get("STORAGE_EMULATOR_HOST", ""), project)


@cache
def _client_for(emulator_host: str, project: str) -> storage.Client:
    from google.cloud import storage

    if emulator_host:
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project=project or "landfall-local", credentials=AnonymousCredentials())
    return storage.Client(project=project or None)


def _blob(uri: str, generation: str = "") -> storage.Blob:
    bucket, name = split_gcs(uri)
    # google-cloud-storage ships no types; a Blob with a generation reads that generation's bytes only.
    blob: storage.Blob = client().bucket(bucket).blob(name, generation=int(generation) if generation else None)
    return blob


def versioned(uri: str, generation: str) -> str:
    """gs://B/NAME#GENERATION (gcloud's form of one generation of an object) for a gs:// URI and a generation;
    the URI unchanged otherwise. open_read reads exactly that generation."""
    return f"{uri}#{generation}" if generation and is_gcs(uri) else uri


def split_version(uri: str) -> tuple[str, str]:
    """versioned()'s parts: (URI, generation), the generation "" when uri names no generation. Only gs:// URIs
    ending in `#DIGITS` name one (the trainer's data files always do, so an object named `x#12` is read as
    `x#12#GENERATION`)."""
    base, mark, generation = uri.rpartition("#")
    if mark and generation.isdigit() and is_gcs(base):
        return base, generation
    return uri, ""


def list_objects(uri: str) -> list[tuple[str, str, int]]:
    """(URI, generation, size) of every file at or under uri, sorted by URI; the generation is "" for local files.
    One listing: what it returns is what later reads at those generations get, whatever lands afterwards."""
    uri = resolve(uri)
    if is_gcs(uri):
        bucket, prefix = split_gcs(uri)
        found = [
            (b.name, str(b.generation or ""), int(b.size or 0))
            for b in client().list_blobs(bucket, prefix=prefix)
            if not b.name.endswith("/")
        ]
        if prefix and not prefix.endswith("/"):
            found = [f for f in found if f[0] == prefix or f[0].startswith(prefix + "/")]
        return sorted((f"gs://{bucket}/{name}", generation, size) for name, generation, size in found)
    return [(path, "", os.path.getsize(path)) for path in list_files(uri)]


def list_files(uri: str) -> list[str]:
    """Every file at or under uri (recursively), sorted; a URI naming one file lists just that file."""
    uri = resolve(uri)
    if is_gcs(uri):
        bucket, prefix = split_gcs(uri)
        names = [b.name for b in client().list_blobs(bucket, prefix=prefix) if not b.name.endswith("/")]
        if prefix and not prefix.endswith("/"):
            names = [n for n in names if n == prefix or n.startswith(prefix + "/")]
        return sorted(f"gs://{bucket}/{name}" for name in names)
    path = Path(uri)
    if path.is_file():
        return [str(path)]
    return sorted(str(p) for p in path.rglob("*") if p.is_file())


def open_read(uri: str) -> IO[bytes]:
    """A binary, seekable stream that reads in chunks (the whole object is never held in memory).

    One generation of a Cloud Storage object (gs://B/NAME#GENERATION) never changes, so with DATA_CACHE_ENV set it
    is downloaded once into that folder and every later open reads the local copy: a run reads its shards once per
    epoch and again for each evaluation (the demo's 4 shards 44 times: 720 requests, 3 of its 4 s of training).
    An object larger than half the folder's free space is streamed each time instead."""
    uri, generation = split_version(resolve(uri))
    if is_gcs(uri):
        if generation and (cached := _cached_version(uri, generation)) is not None:
            return open(cached, "rb")
        blob = _blob(uri, generation)
        if generation:
            _require_generation(blob, uri, generation)
        # google-cloud-storage ships no types; Blob.open("rb") returns a BlobReader, a binary seekable stream. It has
        # no peek, so io's readline (and iterating lines) read it one byte per call: 3.2 million Python calls for the
        # demo's 70 KB table read 44 times, 8 of the run's 11 s. A BufferedReader over it reads lines from a buffer.
        stream: IO[bytes] = io.BufferedReader(blob.open("rb", chunk_size=_READ_CHUNK), buffer_size=_LINE_BUFFER)
        return stream
    return open(uri, "rb")


DATA_CACHE_ENV = "LANDFALL_DATA_CACHE_DIR"
"""A local folder for the generations of objects a run reads (the launcher makes one per node and removes it)."""


def _cached_version(uri: str, generation: str) -> Path | None:
    """The local copy of one generation of an object, downloaded on first use; None without DATA_CACHE_ENV or when
    the object would take more than half the folder's free space. Processes of one node share the folder: each
    downloads into a name of its own and renames it into place (whole or not at all)."""
    folder = os.environ.get(DATA_CACHE_ENV, "")
    if not folder or not os.path.isdir(folder):
        return None
    import hashlib

    path = Path(folder) / hashlib.sha256(f"{uri}#{generation}".encode()).hexdigest()
    if path.is_file():
        return path
    bucket, name = split_gcs(uri)
    found = client().bucket(bucket).get_blob(name, generation=int(generation))
    if found is None:
        _require_generation(_blob(uri, generation), uri, generation)  # raises the DataError naming the generation
        return None
    if int(found.size or 0) > shutil.disk_usage(folder).free // 2:
        return None
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        # A Blob made with the generation, not the one get_blob returned: that one downloads through its mediaLink,
        # which fake-gcs-server writes without the generation (see _require_generation).
        _blob(uri, generation).download_to_filename(str(partial))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def _require_generation(blob: storage.Blob, uri: str, generation: str) -> None:
    """Fails with a DataError naming the object when that generation no longer exists (it was rewritten or deleted
    and the bucket keeps no old generations). exists(), not reload(): a reloaded Blob downloads through its
    mediaLink, which fake-gcs-server writes without the generation (Cloud Storage's has it), so it would read the
    live generation."""
    from trainer.errors import DataError

    if not blob.exists():
        raise DataError(
            f"{uri}#{generation}",
            "this generation no longer exists: the object was rewritten or deleted after its dataset version was "
            "cut, and the run reads only what its version recorded. Land the dataset again (a new _SUCCESS) to "
            "train what is there now",
        )


def exists(uri: str) -> bool:
    uri = resolve(uri)
    return bool(_blob(uri).exists()) if is_gcs(uri) else os.path.exists(uri)


def write_bytes(uri: str, data: bytes, content_type: str = "application/octet-stream") -> None:
    """Write a whole object; locally through a temporary name and an atomic rename."""
    uri = resolve(uri)
    if is_gcs(uri):
        _blob(uri).upload_from_string(data, content_type=content_type)
        return
    os.replace(_complete_temporary(uri, data), uri)


def _complete_temporary(uri: str, data: bytes) -> str:
    """data written and synced beside uri under a temporary name, so uri only ever appears whole."""
    os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
    tmp = f"{uri}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return tmp


def create_bytes(uri: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
    """Write a whole object only if nothing is there yet (atomically: a generation precondition, or a hard link of
    a complete temporary file); False when something already was."""
    uri = resolve(uri)
    if is_gcs(uri):
        from google.api_core.exceptions import PreconditionFailed

        try:
            _blob(uri).upload_from_string(data, content_type=content_type, if_generation_match=0)
        except PreconditionFailed:
            return False
        return True
    tmp = _complete_temporary(uri, data)
    try:
        os.link(tmp, uri)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def upload_file(path: str, uri: str) -> None:
    """Copy a local file to uri (an object, or a local path through a temporary name)."""
    uri = resolve(uri)
    if is_gcs(uri):
        _blob(uri).upload_from_filename(path)
        return
    os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
    tmp = f"{uri}.tmp-{os.getpid()}"
    shutil.copyfile(path, tmp)
    os.replace(tmp, uri)


def download_file(uri: str, path: str) -> None:
    """Copy uri (gs://B/NAME#GENERATION: exactly that generation, or a DataError naming it) to a local file."""
    uri, generation = split_version(resolve(uri))
    if is_gcs(uri):
        blob = _blob(uri, generation)
        if generation:
            _require_generation(blob, uri, generation)
        blob.download_to_filename(path)
    else:
        shutil.copyfile(uri, path)


def open_write(uri: str) -> IO[bytes]:
    """A binary stream that writes uri as it goes: a resumable upload for gs:// (the object appears when the stream
    is closed, nothing is staged on the local disk), a plain file otherwise (its folder made)."""
    uri = resolve(uri)
    if is_gcs(uri):
        # google-cloud-storage ships no types; Blob.open("wb") returns a BlobWriter. ignore_flush: torch.save
        # flushes the stream it writes to, and a flush cannot finish a resumable upload part-way.
        stream: IO[bytes] = _blob(uri).open("wb", ignore_flush=True)
        return stream
    os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
    return open(uri, "wb")


def rename(uri: str, new_uri: str) -> None:
    """Move one file: a server-side copy then a delete for gs:// (both in one bucket), an atomic rename locally."""
    uri, new_uri = resolve(uri), resolve(new_uri)
    if is_gcs(uri):
        source = _blob(uri)
        bucket, name = split_gcs(new_uri)
        source.bucket.copy_blob(source, client().bucket(bucket), name)
        source.delete()
        return
    os.replace(uri, new_uri)


def delete_file(uri: str) -> None:
    """Remove one file or object; a missing one is an error (FileNotFoundError, or google's NotFound)."""
    uri = resolve(uri)
    if is_gcs(uri):
        _blob(uri).delete()
    else:
        os.unlink(uri)


def delete_tree(uri: str) -> None:
    """Remove everything at or under uri; missing things are fine."""
    uri = resolve(uri)
    if is_gcs(uri):
        for name in list_files(uri.rstrip("/") + "/"):
            _blob(name).delete()
    else:
        shutil.rmtree(uri, ignore_errors=True)
