"""A stopped stack, as a user meets it: a shell that sourced .landfall/env after the stack was stopped. The real
`landfall` process answers at once, in one line that says what to do (it used to hang for 100 s and more)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.local import processes

REPO = Path(__file__).resolve().parents[2]
PATIENCE_S = 15.0
"""Far above the answer (about a second) and far below the hang; the time itself is printed, not pinned."""


def stopped_stack_env(tmp_path: Path) -> dict[str, str]:
    """The variables `landfall up` exports, naming ports nothing listens on any more."""
    closed = {name: processes.free_port() for name in ("pubsub", "firestore", "storage", "vertex")}
    return {
        **{k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")},
        "GOOGLE_CLOUD_PROJECT": "landfall-local",
        "LANDFALL_LANDING_BUCKET": "landfall-landing",
        "PUBSUB_EMULATOR_HOST": f"127.0.0.1:{closed['pubsub']}",
        "FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{closed['firestore']}",
        "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{closed['storage']}",
        "LANDFALL_VERTEX_ENDPOINT": f"127.0.0.1:{closed['vertex']}",
        "LANDFALL_STATE_DIR": str(tmp_path),
    }


@pytest.mark.parametrize("argv", [["runs"], ["run", "run-1"], ["datasets"], ["sweep"], ["ui"]], ids=lambda a: a[0])
def test_a_command_against_a_stopped_stack_answers_at_once_in_one_line(argv: list[str], tmp_path: Path) -> None:
    env = stopped_stack_env(tmp_path)
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "landfall.cli", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    elapsed = time.monotonic() - began
    print(f"landfall {' '.join(argv)} with the stack stopped answered in {elapsed:.2f} s")
    variable = "PUBSUB_EMULATOR_HOST" if argv == ["sweep"] else "FIRESTORE_EMULATOR_HOST"
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        f"landfall {argv[0]}: the local stack is not running ({variable}={env[variable]} does not "
        "answer): `landfall up` starts it\n"
    )
    assert elapsed < PATIENCE_S
