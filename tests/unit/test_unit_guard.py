"""The guard in tests/unit/conftest.py: a unit test that starts a process or opens a connection fails, and is told
to move to tests/integration/."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import subprocess
import sys
from collections.abc import Callable

import pytest


def _connect() -> None:
    with socket.socket() as sock:
        sock.connect(("127.0.0.1", 9))


WAYS: dict[str, Callable[[], object]] = {
    "subprocess.run": lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
    "os.posix_spawn": lambda: os.posix_spawn("/bin/true", ["true"], {}),
    "multiprocessing": lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
    "socket.connect": _connect,
}


@pytest.mark.parametrize("way", list(WAYS))
def test_starting_a_process_or_connecting_fails_and_says_where_the_test_belongs(way: str) -> None:
    with pytest.raises(pytest.fail.Exception, match="move this test to tests/integration/"):
        WAYS[way]()


def test_code_that_catches_exception_cannot_swallow_the_guard() -> None:
    # contextlib.suppress(Exception) stands for the handlers production code has; the guard must get past them.
    with pytest.raises(pytest.fail.Exception, match="started a subprocess"), contextlib.suppress(Exception):
        subprocess.run(["true"], check=False)


def test_a_unit_test_sees_no_local_stack_and_no_state_folder_of_the_repository() -> None:
    """What `landfall up` / `make demo` leave (an exported .landfall/env, the repository's .landfall/) reaches no unit
    test: the emulator variables are unset and the state folder is the test's own, empty."""
    from deploy.local.provision import REPO_ROOT, default_state_dir
    from landfall.stack_env import load_stack_env
    from tests.unit.conftest import STACK_VARIABLES

    assert {"PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST", "STORAGE_EMULATOR_HOST"} <= set(STACK_VARIABLES)
    assert not [name for name in STACK_VARIABLES if name in os.environ]
    assert default_state_dir() != REPO_ROOT / ".landfall" and not any(default_state_dir().iterdir())
    assert load_stack_env() is False
