"""LANDFALL_CHECKPOINT_DIR: the local folder a team's code saves its checkpoints in, which ends up under
AIP_CHECKPOINT_DIR (docs/trainer-contract.md, "Checkpoints").

On Vertex the folder is AIP_CHECKPOINT_DIR's Cloud Storage FUSE path (/gcs/BUCKET/...): what the code writes is in
the bucket as it writes it. Where no mount is (the Vertex emulator, a laptop) the launcher stands in for it, as it
does for the model folder: before the code starts it downloads what AIP_CHECKPOINT_DIR holds into a local folder (so
a resumed attempt finds what the previous one saved), and when the code ends, however it ends (success, a failure,
SIGTERM), it uploads the files the code added or changed there. Only those: on several nodes each node's folder
holds its own writes over the same restored files, and a node must not put back an old copy over a newer one that
another node saved. Nothing is deleted under AIP_CHECKPOINT_DIR.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from schemas.checkpoint_layout import COMMIT, STEP_FILE
from schemas.trainer_spec import CHECKPOINT_DIR_ENV, RESUME_STEP_ENV
from trainer import storage
from trainer.logs import log

__all__ = [
    "CHECKPOINT_DIR_ENV",
    "RESUME_STEP_ENV",
    "CheckpointFolder",
    "newest_committed_step",
    "resume_env",
    "save_checkpoints",
    "stage_checkpoints",
]
AIP_CHECKPOINT_ENV = "AIP_CHECKPOINT_DIR"


@dataclass(frozen=True)
class CheckpointFolder:
    """This node's checkpoint folder."""

    path: str
    """What LANDFALL_CHECKPOINT_DIR says."""
    uri: str = ""
    """AIP_CHECKPOINT_DIR where the launcher mirrors the folder to it; "" where nothing is mirrored (the mount writes
    through, or the job names no AIP_CHECKPOINT_DIR)."""
    restored: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Each file downloaded at start (relative path) and its (size, mtime_ns) then: what was not changed since is not
    uploaded again."""


def _signature(path: Path) -> tuple[int, int]:
    found = path.stat()
    return found.st_size, found.st_mtime_ns


def stage_checkpoints(environ: Mapping[str, str], workdir: Path, mount: str) -> CheckpointFolder:
    """The checkpoint folder for this node: AIP_CHECKPOINT_DIR's FUSE path where the mount shows it; else a local
    folder under workdir holding a copy of what AIP_CHECKPOINT_DIR holds (an empty one when the job names none). A
    job that gives LANDFALL_CHECKPOINT_DIR as gs:// (a retry going on from its line's folder) means that folder
    instead of AIP_CHECKPOINT_DIR."""
    line = environ.get(CHECKPOINT_DIR_ENV, "")  # a retry's line's folder (gs://), set by the job
    uri = line if line.startswith("gs://") else environ.get(AIP_CHECKPOINT_ENV, "")
    if uri.startswith("gs://") and os.path.isdir(mount):
        return CheckpointFolder(f"{mount}/{uri.removeprefix('gs://')}")
    local = workdir / "checkpoints"
    local.mkdir(parents=True, exist_ok=True)
    if not uri:
        return CheckpointFolder(str(local))
    base = uri.rstrip("/") + "/"
    restored: dict[str, tuple[int, int]] = {}
    for file_uri in storage.list_files(base):
        relative = file_uri.removeprefix(base)
        path = local / relative
        if not path.resolve().is_relative_to(local.resolve()):  # an object named a/../../x stays out of the folder
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        storage.download_file(file_uri, str(path))
        restored[relative] = _signature(path)
    if restored:
        log("checkpoints restored from AIP_CHECKPOINT_DIR", files=len(restored), checkpoint_dir=uri)
    return CheckpointFolder(str(local), base, restored)


def newest_committed_step(folder: CheckpointFolder) -> int | None:
    """The step of the newest committed checkpoint in the folder (a `step-N` folder holding commit.json), or None."""
    root = Path(folder.path)
    if not root.is_dir():
        return None
    steps = [
        int(match.group(1))
        for child in root.iterdir()
        if (match := STEP_FILE.search(f"{child.name}/{COMMIT}")) and (child / COMMIT).is_file()
    ]
    return max(steps, default=None)


def resume_env(folder: CheckpointFolder) -> dict[str, str]:
    """LANDFALL_RESUME_STEP for the code's environment when the folder holds a committed checkpoint; else nothing."""
    step = newest_committed_step(folder)
    if step is None:
        return {}
    log("a committed checkpoint is there to resume from", step=step, checkpoint_dir=folder.path)
    return {RESUME_STEP_ENV: str(step)}


def save_checkpoints(folder: CheckpointFolder) -> list[str]:
    """Upload what the code added or changed in the folder since it was staged; the URIs written. A file that
    cannot be uploaded is logged (the run's outcome is the code's, not the copy's) and the rest still go."""
    if not folder.uri:
        return []
    from google.api_core.exceptions import GoogleAPIError

    root = Path(folder.path)
    written: list[str] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        relative = str(path.relative_to(root))
        if folder.restored.get(relative) == _signature(path):
            continue
        uri = storage.join(folder.uri, relative)
        try:
            storage.upload_file(str(path), uri)
        except (OSError, GoogleAPIError) as exc:
            log(
                "a checkpoint file could not be copied to AIP_CHECKPOINT_DIR",
                severity="WARNING",
                uri=uri,
                error=str(exc),
            )
            continue
        written.append(uri)
    if written:
        log("checkpoints copied to AIP_CHECKPOINT_DIR", files=len(written), checkpoint_dir=folder.uri)
    return written
