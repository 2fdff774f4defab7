"""Cloud Storage adapter for ingest and the dispatcher: paged listing, one object's metadata, bounded reads, and
an object's head.

Everything ingest needs from GCS goes through GcsObjects, so handlers can be tested with a fake of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from functions.errors import PermanentError, as_transient


@dataclass(frozen=True)
class ObjectInfo:
    name: str
    size: int
    generation: str
    crc32c: str = ""
    """Base64 of the big-endian CRC32C, as the JSON API gives it."""
    updated: datetime | None = None


class TooLarge(PermanentError):
    """An object is bigger than the caller allows reading."""


def _info(blob: Any) -> ObjectInfo:
    return ObjectInfo(
        name=blob.name,
        size=int(blob.size or 0),
        generation=str(blob.generation or ""),
        crc32c=blob.crc32c or "",
        updated=blob.updated,
    )


class GcsObjects:
    def __init__(self, client: Any, page_size: int = 1000) -> None:
        self._client = client
        self._page_size = page_size

    def list(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under prefix, fetched page by page (constant memory, however many objects)."""
        try:
            for blob in self._client.list_blobs(bucket, prefix=prefix, page_size=self._page_size):
                yield _info(blob)
        except Exception as exc:
            raise as_transient(exc, f"Cloud Storage: listing gs://{bucket}/{prefix}") from exc

    def stat(self, bucket: str, name: str) -> ObjectInfo | None:
        """The object's current metadata, or None when it does not exist (any more)."""
        try:
            blob = self._client.bucket(bucket).get_blob(name)
        except Exception as exc:
            raise as_transient(exc, f"Cloud Storage: reading gs://{bucket}/{name}") from exc
        return _info(blob) if blob is not None else None

    def write(self, bucket: str, name: str, data: bytes, content_type: str) -> None:
        """Write a whole object (the dispatcher's dataset listing for a run)."""
        try:
            self._client.bucket(bucket).blob(name).upload_from_string(data, content_type=content_type)
        except Exception as exc:
            raise as_transient(exc, f"Cloud Storage: writing gs://{bucket}/{name}") from exc

    def read_head(self, bucket: str, name: str, generation: str, max_bytes: int) -> bytes | None:
        """The first max_bytes of that generation of the object (all of it when smaller), or None when it is gone.
        Any size is valid: only the head is downloaded (one ranged read), for checks that need a header."""
        from google.api_core.exceptions import NotFound

        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        blob = self._client.bucket(bucket).blob(name, generation=int(generation) if generation else None)
        try:
            # end is inclusive (an HTTP Range); google-cloud-storage is unannotated
            data: bytes = blob.download_as_bytes(start=0, end=max_bytes - 1)
        except NotFound:
            return None
        except Exception as exc:
            raise as_transient(exc, f"Cloud Storage: reading gs://{bucket}/{name}") from exc
        return data[:max_bytes]

    def read(self, bucket: str, name: str, generation: str, max_bytes: int) -> bytes | None:
        """The content of that generation of the object, or None when it is gone. Larger than max_bytes: TooLarge
        (only max_bytes + 1 bytes are ever downloaded)."""
        from google.api_core.exceptions import NotFound

        blob = self._client.bucket(bucket).blob(name, generation=int(generation) if generation else None)
        try:
            data: bytes = blob.download_as_bytes(start=0, end=max_bytes)  # google-cloud-storage is unannotated
        except NotFound:
            return None
        except Exception as exc:
            raise as_transient(exc, f"Cloud Storage: reading gs://{bucket}/{name}") from exc
        if len(data) > max_bytes:
            raise TooLarge(f"gs://{bucket}/{name} is larger than {max_bytes} bytes")
        return data
