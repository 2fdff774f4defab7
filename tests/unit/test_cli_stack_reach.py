"""A command that needs the stack checks it first and answers in one line with the next step; a bad
--state, and --port on a running stack, are refused in one line too. No process and no connection: the probe and
the process check are fakes (tests/integration/test_cli_stack_down.py runs the real command against closed ports)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import pytest

from deploy.local import provision
from deploy.local.processes import RunningService
from landfall import cli, reach, stack_env
from landfall.errors import CommandError
from schemas.run_record import RunState

LOCAL_ENV = {
    "GOOGLE_CLOUD_PROJECT": "landfall-local",
    "PUBSUB_EMULATOR_HOST": "127.0.0.1:8085",
    "FIRESTORE_EMULATOR_HOST": "127.0.0.1:8086",
    "STORAGE_EMULATOR_HOST": "http://127.0.0.1:4443",
    "LANDFALL_VERTEX_ENDPOINT": "127.0.0.1:8090",
}
STATE = Path("/repo/.landfall")


def service(name: str, pid: int, port: int | None) -> RunningService:
    return RunningService(name, pid, port, STATE / "logs" / f"{name}.log")


RUNNING = [service("pubsub", 101, 8085), service("firestore", 102, 8086), service("storage", 103, 4443)]


def never_called(*_args: object) -> bool:
    raise AssertionError("the probe must not be called")


def check(
    needs: Sequence[str],
    env: dict[str, str],
    recorded: Sequence[RunningService] = (),
    *,
    answering: frozenset[int] = frozenset(),
    dead: frozenset[int] = frozenset(),
) -> str | None:
    """The CommandError's message, or None when the check passes."""
    try:
        reach.check_stack(
            needs,
            env,
            STATE,
            recorded,
            answers=lambda _host, port: port in answering,
            alive=lambda pid: pid not in dead,
        )
    except CommandError as exc:
        return str(exc)
    return None


def test_a_reachable_stack_passes_and_a_command_needing_nothing_is_not_checked() -> None:
    assert check(["firestore"], LOCAL_ENV, RUNNING, answering=frozenset({8086})) is None
    assert check(["pubsub", "firestore"], LOCAL_ENV, RUNNING, answering=frozenset({8085, 8086})) is None
    reach.check_stack([], {}, STATE, [], answers=never_called)


def test_google_cloud_is_not_probed() -> None:
    reach.check_stack(["firestore"], {"GOOGLE_CLOUD_PROJECT": "prod"}, STATE, [], answers=never_called)


@pytest.mark.parametrize(
    ("env", "recorded", "dead", "expected"),
    [
        pytest.param(
            {},
            [],
            frozenset(),
            "no local stack is running and GOOGLE_CLOUD_PROJECT is not set: `landfall up` starts the local "
            "stack (for Google Cloud, set GOOGLE_CLOUD_PROJECT)",
            id="no-env-no-project",
        ),
        pytest.param(
            LOCAL_ENV,
            [],
            frozenset(),
            "the local stack is not running (FIRESTORE_EMULATOR_HOST=127.0.0.1:8086 does not answer): "
            "`landfall up` starts it",
            id="stopped",
        ),
        pytest.param(
            LOCAL_ENV,
            RUNNING,
            frozenset({102}),
            "the local stack is partly down (firestore not running; log /repo/.landfall/logs/firestore.log): "
            "`landfall up` starts again what is down",
            id="partly-down",
        ),
        pytest.param(
            LOCAL_ENV | {"FIRESTORE_EMULATOR_HOST": "127.0.0.1:9999"},
            RUNNING,
            frozenset(),
            "FIRESTORE_EMULATOR_HOST=127.0.0.1:9999 is not the running stack's firestore (127.0.0.1:8086): "
            "`source /repo/.landfall/env` again",
            id="old-env",
        ),
        pytest.param(
            LOCAL_ENV,
            RUNNING,
            frozenset(),
            "the local stack's firestore (pid 102) does not answer on 127.0.0.1:8086; see "
            "/repo/.landfall/logs/firestore.log, or `landfall restart firestore`",
            id="up-not-answering",
        ),
        pytest.param(
            {k: v for k, v in LOCAL_ENV.items() if k != "FIRESTORE_EMULATOR_HOST"},
            RUNNING,
            frozenset(),
            "FIRESTORE_EMULATOR_HOST is not set although other local stack variables are: `source "
            "/repo/.landfall/env` again, or `landfall up` if the stack is not running",
            id="half-env",
        ),
    ],
)
def test_an_unreachable_stack_is_one_line_saying_why_and_what_to_do(
    env: dict[str, str], recorded: list[RunningService], dead: frozenset[int], expected: str
) -> None:
    assert check(["firestore"], env, recorded, dead=dead) == expected


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:8085", ("127.0.0.1", 8085)),
        ("http://127.0.0.1:4443", ("127.0.0.1", 4443)),
        ("http://localhost:4443/storage/v1/", ("localhost", 4443)),
        ("[::1]:8086", ("::1", 8086)),
        ("localhost", None),
        ("", None),
    ],
)
def test_host_port(address: str, expected: tuple[str, int] | None) -> None:
    assert reach.host_port(address) == expected


@pytest.fixture()
def stack_down(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The environment of a shell that sourced .landfall/env, with the stack since stopped (nothing answers)."""
    for key in LOCAL_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(provision, "default_state_dir", lambda: tmp_path)
    monkeypatch.setattr(stack_env, "default_state_dir", lambda: tmp_path)
    monkeypatch.setattr(reach, "port_answers", lambda _host, _port: False)


COMMANDS = [
    ["runs"],
    ["run", "run-1"],
    ["logs", "run-1"],
    ["datasets"],
    ["dataset", "gs://b/p/"],
    ["sweep"],
    ["retrain", "gs://b/p/"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
def test_with_the_stack_stopped_every_command_that_needs_it_says_so_in_one_line(
    argv: list[str], stack_down: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in LOCAL_ENV.items():
        monkeypatch.setenv(key, value)
    assert cli.main(argv) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.count("\n") == 1 and out.err.startswith(f"landfall {argv[0]}: the local stack is not running (")
    assert out.err.endswith("does not answer): `landfall up` starts it\n")


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
def test_without_the_env_every_command_that_needs_the_stack_says_what_to_do(
    argv: list[str], stack_down: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 1
    assert capsys.readouterr().err == (
        f"landfall {argv[0]}: no local stack is running and GOOGLE_CLOUD_PROJECT is "
        "not set: `landfall up` starts the local stack (for Google Cloud, set "
        "GOOGLE_CLOUD_PROJECT)\n"
    )


def test_commands_that_need_the_stack_are_the_ones_checked() -> None:
    subcommands = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    commands = set(subcommands.choices)
    assert set(cli.STACK_NEEDS) <= commands
    assert {"runs", "run", "logs", "datasets", "dataset", "sweep", "retrain"} <= set(cli.STACK_NEEDS)
    assert all(set(needs) <= set(reach.EMULATOR_VARIABLES) for needs in cli.STACK_NEEDS.values())


def test_a_bogus_state_is_refused_with_the_states(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["runs", "--state", "BOGUS"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert "'BOGUS' is not a run state; the states are: " + ", ".join(RunState) in err
    assert cli.build_parser().parse_args(["runs", "--state", "failed"]).state == RunState.FAILED


def test_port_on_a_running_stack_says_to_stop_it_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from deploy.local import stack

    def no_start(**_kwargs: object) -> None:
        raise AssertionError("up must not be called")

    monkeypatch.setattr(stack, "status", lambda: [(service("pubsub", 101, 8085), True)])
    monkeypatch.setattr(stack, "up", no_start)
    assert cli.main(["up", "--port", "pubsub=0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the local stack is already up" in err and "`landfall down` first" in err
