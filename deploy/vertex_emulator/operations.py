"""Long-running operations the emulator hands out, and `google.longrunning.Operations.GetOperation` to read them.

UploadModel, DeleteModel and DeleteModelVersion answer a `google.longrunning.Operation`, as Vertex does. The
emulator does the work before it answers, so every operation is already done (its `response` set); GetOperation
answers it again by name (NOT_FOUND for a name it never gave), which is what a client's `operation.result()` and
`done()` call. Each operation is one file (`DIR/operations/<n>.pb`, the serialized message, written atomically), so
operations survive an emulator restart as models do.
"""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path

from google.cloud.aiplatform_v1.types import GenericOperationMetadata
from google.longrunning import operations_pb2
from google.protobuf import any_pb2
from google.protobuf.message import Message

from deploy.vertex_emulator.wellknown import timestamp

OPERATIONS_DIR = "operations"
SUFFIX = ".pb"


def pack(message: Message) -> any_pb2.Any:
    """A protobuf message (proto-plus messages: pass `Type.pb(message)`) as google.protobuf.Any."""
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def generic_metadata(moment: datetime | None = None) -> GenericOperationMetadata:
    """The common part of Vertex's operation metadata: created and last updated now."""
    stamp = timestamp(moment or datetime.now(UTC))
    return GenericOperationMetadata(create_time=stamp, update_time=stamp)


class OperationStore:
    """Done operations by name, in memory and on disk (`state_dir/operations/`)."""

    def __init__(self, state_dir: Path) -> None:
        self._folder = Path(state_dir) / OPERATIONS_DIR
        self._folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._operations: dict[str, bytes] = {}
        self._last_id = 0
        for path in sorted(self._folder.glob(f"*{SUFFIX}")):
            data = path.read_bytes()
            operation = operations_pb2.Operation.FromString(data)
            self._operations[operation.name] = data
            self._last_id = max(self._last_id, int(path.stem))

    def record(self, resource: str, metadata: Message, response: Message) -> operations_pb2.Operation:
        """A done operation under `resource` (`projects/P/locations/L[/models/M]`), kept for GetOperation."""
        with self._lock:
            self._last_id += 1
            number = self._last_id
            operation = operations_pb2.Operation(
                name=f"{resource}/operations/{number}", metadata=pack(metadata), done=True, response=pack(response)
            )
            data = operation.SerializeToString()
            tmp = self._folder / f".{number}{SUFFIX}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, self._folder / f"{number}{SUFFIX}")
            self._operations[operation.name] = data
        return operation

    def get(self, name: str) -> operations_pb2.Operation | None:
        """The operation of that name, or None."""
        with self._lock:
            data = self._operations.get(name)
        return operations_pb2.Operation.FromString(data) if data is not None else None
