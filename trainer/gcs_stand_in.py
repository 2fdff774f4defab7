"""`python -m trainer.gcs_stand_in -- COMMAND ...`: what the Vertex emulator runs around a team's container command,
standing in for Vertex's Cloud Storage FUSE mount (/gcs/), which no local machine has.

It downloads the dataset's data objects (and the route's champion model, LANDFALL_CHAMPION_MODEL_DIR, when the job
names one, and what AIP_CHECKPOINT_DIR holds) into local folders, points LANDFALL_DATA_DIR, LANDFALL_MODEL_DIR,
LANDFALL_DATA_FILES, LANDFALL_METRICS_FILE, LANDFALL_CHAMPION_MODEL_DIR and LANDFALL_CHECKPOINT_DIR at local paths,
runs the command (forwarding SIGTERM/SIGINT), copies back the checkpoints it added or changed whatever its end
(trainer/checkpoint_folder.py), and when it exits 0 copies the model folder to AIP_MODEL_DIR and writes the metrics
lines (metrics.jsonl) and metrics.json from them there, as the listener would find them on Vertex. It exits with the
command's status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from schemas.user_metrics import METRICS_LINES_FILE, metrics_document
from trainer import storage
from trainer.checkpoint_folder import CHECKPOINT_DIR_ENV, save_checkpoints, stage_checkpoints
from trainer.logs import log
from trainer.user_code import CHAMPION_DIR_ENV, new_workdir, publish_model, stage, stage_folder

NO_MOUNT = "/nonexistent-gcs-mount"
"""No FUSE mount here: every folder the job names is staged."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print("usage: python -m trainer.gcs_stand_in -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    environ = dict(os.environ)
    workdir = new_workdir(environ)
    paths = stage(environ, workdir, mount=NO_MOUNT)
    checkpoints = stage_checkpoints(environ, workdir, NO_MOUNT)
    env = {
        **environ,
        "LANDFALL_DATA_DIR": paths.data_dir,
        "LANDFALL_MODEL_DIR": paths.model_dir,
        "LANDFALL_DATA_FILES": paths.data_files,
        "LANDFALL_METRICS_FILE": paths.metrics_file,
        CHECKPOINT_DIR_ENV: checkpoints.path,
    }
    if environ.get(CHAMPION_DIR_ENV):  # the route's champion, read through the mount on Vertex
        env[CHAMPION_DIR_ENV] = stage_folder(environ[CHAMPION_DIR_ENV], workdir / "champion", NO_MOUNT)
    child = subprocess.Popen(command, env=env)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    status = child.wait()
    save_checkpoints(checkpoints)  # however the command ended, as the mount would have kept them
    model_uri = environ.get("AIP_MODEL_DIR", "")
    if status == 0 and model_uri:
        publish_model(paths, model_uri)
        text = Path(paths.metrics_file).read_text(errors="replace")
        if text.strip() and environ.get("RANK", "0") in ("", "0"):
            document = metrics_document(text, form="image", world_size=int(environ.get("WORLD_SIZE", "1") or 1))
            storage.write_bytes(
                storage.join(model_uri, "metrics.json"), json.dumps(document, indent=2).encode(), "application/json"
            )
            # On Vertex LANDFALL_METRICS_FILE is METRICS_LINES_FILE in the mounted model folder: the lines are there too
            # (a canary's figures are read from them, docs/canary.md).
            storage.write_bytes(storage.join(model_uri, METRICS_LINES_FILE), text.encode(), "application/x-ndjson")
    log("container command ended", exit_code=status)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main())
