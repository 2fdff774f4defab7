"""What the local stack keeps across `landfall down`/`up` and restarts, and `landfall down --wipe`, which drops it.

Under the state folder (.landfall):
- data/firestore/: snapshots of the Firestore emulator. Google's emulator keeps documents in memory; before it is
  stopped the stack exports them over its HTTP API into a new snapshot folder, and LATEST names the last complete
  one, which the next start imports (--import-data). A snapshot becomes LATEST only once its export has answered.
- data/storage/: fake-gcs-server's filesystem backend (buckets, objects, generations, metadata).
- vertex/: the Vertex emulator's job table and replica logs (it has always kept them).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

from deploy.local.processes import StackError

LATEST = "LATEST"
SNAPSHOT_PREFIX = "snapshot-"
EXPORT_TIMEOUT_S = 60.0


def firestore_dir(state_dir: Path) -> Path:
    return state_dir / "data" / "firestore"


def storage_dir(state_dir: Path) -> Path:
    return state_dir / "data" / "storage"


def vertex_dir(state_dir: Path) -> Path:
    return state_dir / "vertex"


def kept_dirs(state_dir: Path) -> tuple[Path, ...]:
    """Every folder that holds the stack's data; `landfall down --wipe` removes them."""
    return (state_dir / "data", vertex_dir(state_dir))


def _metadata_file(snapshot: Path) -> Path:
    return snapshot / f"{snapshot.name}.overall_export_metadata"


def latest_firestore_snapshot(state_dir: Path) -> Path | None:
    """The export metadata file of the last complete Firestore snapshot (for --import-data), or None."""
    pointer = firestore_dir(state_dir) / LATEST
    if not pointer.exists():
        return None
    metadata = _metadata_file(firestore_dir(state_dir) / pointer.read_text().strip())
    if not metadata.exists():
        raise StackError(
            f"{pointer} names a Firestore snapshot without {metadata.name}; the data folder was changed "
            f"by hand. Restore it, or start clean with `landfall down --wipe`."
        )
    return metadata


def save_firestore(host_port: str, project: str, state_dir: Path, timeout_s: float = EXPORT_TIMEOUT_S) -> Path:
    """Export every document of the emulator at host_port into a new snapshot, make it LATEST, drop older ones."""
    folder = firestore_dir(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{SNAPSHOT_PREFIX}{time.time_ns()}"
    body = {
        "database": f"projects/{project}/databases/(default)",
        "export_directory": str(folder.resolve()),
        "export_name": name,
    }
    request = urllib.request.Request(
        f"http://{host_port}/emulator/v1/projects/{project}:export",
        method="POST",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        urllib.request.urlopen(request, timeout=timeout_s).close()
    except (urllib.error.URLError, OSError) as exc:
        shutil.rmtree(folder / name, ignore_errors=True)
        detail = exc.read().decode(errors="replace") if isinstance(exc, urllib.error.HTTPError) else str(exc)
        raise StackError(
            f"the Firestore emulator at {host_port} did not export its documents ({detail}); what was "
            f"written since the last snapshot in {folder} is lost"
        ) from exc
    if not _metadata_file(folder / name).exists():
        raise StackError(f"the Firestore emulator answered the export but wrote no {_metadata_file(folder / name)}")
    pointer = folder / LATEST
    tmp = pointer.with_suffix(".tmp")
    tmp.write_text(name)
    os.replace(tmp, pointer)
    for old in folder.glob(f"{SNAPSHOT_PREFIX}*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return folder / name


def wipe(state_dir: Path) -> list[Path]:
    """Remove every kept folder; returns those that existed."""
    removed = [path for path in kept_dirs(state_dir) if path.exists()]
    for path in removed:
        shutil.rmtree(path)
    return removed
