"""tests/unit/ starts no process and opens no connection: a guard fails any unit test that tries.

The guard wraps each unit test's setup (its fixtures, session-scoped ones included, so a unit test that asks for
an emulator fixture is caught too) and its call. Teardown is left alone: at the end of a whole-suite run the last
test's teardown is where the integration and e2e fixtures stop their emulators and servers.

It refuses, with a message naming the test and saying where it belongs:
- new processes: subprocess (every Popen), os.fork / forkpty / posix_spawn / system, multiprocessing and
  torch.multiprocessing processes, multiprocessing's helper processes (resource tracker, forkserver);
- the network: socket connect / connect_ex to any address, and listen (a server).

Each unit test also runs apart from a local stack (`landfall up`, `make demo`) left running on this machine: the
variables the stack's env file sets (deploy/local/stack.py stack_env: the emulator hosts, the Vertex endpoint, the
buckets, the project) are unset, and LANDFALL_STATE_DIR points at an empty folder of the test's own, so neither an
exported `.landfall/env` nor the repository's `.landfall/` state reaches a test. A test that wants one sets it.
"""

from __future__ import annotations

import _posixsubprocess
import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings

# Property tests (tests/unit/fuzz/ and the planner's): `ci` by default, bounded and reproducible inside `make test`;
# `make fuzz` selects `fuzz` (HYPOTHESIS_PROFILE=fuzz), the same properties over many more, random examples
# (FUZZ_EXAMPLES per property, 1,000 unless set: `make fuzz FUZZ_EXAMPLES=10000`).
settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "1000")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _stack_variables() -> tuple[str, ...]:
    """The variables `landfall up` writes to .landfall/env, named by the code that writes them."""
    from deploy.local.stack import stack_env
    from deploy.topology import load_topology

    topology = load_topology()
    return tuple(stack_env(topology, dict.fromkeys(topology.local_ports, 0)))


STACK_VARIABLES = _stack_variables()


@pytest.fixture(autouse=True)
def apart_from_a_local_stack(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No local stack's variables and an empty state folder (the module's docstring)."""
    from deploy.local.provision import STATE_DIR_ENV

    for name in STACK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path_factory.mktemp("landfall-state")))


MOVE = "tests/unit/ starts no process and opens no connection: move this test to tests/integration/"


def _refuse(what: str, nodeid: str) -> Callable[..., Any]:
    def refused(*_args: Any, **_kwargs: Any) -> Any:
        pytest.fail(f"{nodeid} {what}; {MOVE} (or give the code under test a fake instead)", pytrace=True)

    return refused


@contextmanager
def refusing_processes_and_sockets(nodeid: str) -> Iterator[None]:
    """Within the block, starting a process or opening a connection fails the test `nodeid`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", _refuse("started a subprocess", nodeid))
        patch.setattr(_posixsubprocess, "fork_exec", _refuse("started a process (fork_exec)", nodeid))
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
            if hasattr(os, name):
                patch.setattr(os, name, _refuse(f"started a process (os.{name})", nodeid))
        patch.setattr(
            multiprocessing.process.BaseProcess, "start", _refuse("started a multiprocessing process", nodeid)
        )
        for name in ("connect", "connect_ex"):
            patch.setattr(socket.socket, name, _refuse(f"opened a network connection (socket.{name})", nodeid))
        patch.setattr(socket.socket, "listen", _refuse("listened on a socket (a server)", nodeid))
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with refusing_processes_and_sockets(item.nodeid):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with refusing_processes_and_sockets(item.nodeid):
        return (yield)


# What the integration and e2e fixtures point at: the emulators' standard variables and the Vertex endpoint. Under
# pytest-xdist a worker runs unit tests after integration modules whose session fixtures set these (make test found
# `landfall logs` taking a unit test's "Google Cloud" run for a local-stack one); a unit test starts without them.
STACK_VARIABLES = (
    "PUBSUB_EMULATOR_HOST",
    "FIRESTORE_EMULATOR_HOST",
    "STORAGE_EMULATOR_HOST",
    "LANDFALL_VERTEX_ENDPOINT",
)


@pytest.fixture(autouse=True)
def _no_stack_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in STACK_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
