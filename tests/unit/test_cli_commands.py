"""The `landfall` parser as a whole (every command has help) and the pure parts of the dataset commands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from landfall.cli import build_parser
from landfall.commands.datasets import DatasetUriError, describe_dataset, parse_dataset_uri, short
from schemas.dataset_record import DatasetStatus, parse_dataset_record
from schemas.errors import SchemaError


def _subparsers() -> argparse._SubParsersAction:
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))


def test_every_command_has_help_text() -> None:
    sub = _subparsers()
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    assert {"up", "down", "status", "datasets", "dataset", "retrain", "sweep"} <= set(helps)
    assert all(text and len(text) > 20 for text in helps.values()), helps


@pytest.mark.parametrize("name", ["datasets", "dataset", "retrain", "sweep"])
def test_dataset_commands_describe_themselves_and_every_option(name: str) -> None:
    parser = _subparsers().choices[name]
    assert parser.description
    assert all(action.help for action in parser._actions if action.dest != "help")


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["datasets", "--status", "DONE"], "argument --status: invalid choice: 'DONE'"),
        (["datasets", "--limit", "0"], "argument --limit: expected a whole number >= 1, got '0'"),
        (["dataset"], "the following arguments are required: URI"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2 and error in capsys.readouterr().err


def test_status_is_case_insensitive() -> None:
    assert build_parser().parse_args(["datasets", "--status", "refused"]).status == "REFUSED"


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("gs://landfall-landing/datasets/a/", ("landfall-landing", "datasets/a/")),
        ("gs://landfall-landing/datasets/a", ("landfall-landing", "datasets/a/")),
        ("gs://b/x/y/z/", ("b", "x/y/z/")),
    ],
)
def test_parse_dataset_uri(uri: str, expected: tuple[str, str]) -> None:
    assert parse_dataset_uri(uri) == expected


@pytest.mark.parametrize("uri", ["", "gs://", "gs://b", "gs://b/", "gs://b//", "s3://b/p/", "b/p/", "gs:///p/"])
def test_parse_dataset_uri_refuses_what_is_not_a_folder(uri: str) -> None:
    with pytest.raises(DatasetUriError, match=r"expected a dataset folder gs://BUCKET/PREFIX/"):
        parse_dataset_uri(uri)


@pytest.mark.parametrize(
    ("text", "width", "expected"),
    [
        ("", 10, ""),
        ("short", 10, "short"),
        ("exactly 10", 10, "exactly 10"),
        ("one more c.", 10, "one mor..."),
        ("lines\n  and\tspaces", 80, "lines and spaces"),
    ],
)
def test_short(text: str, width: int, expected: str) -> None:
    assert short(text, width) == expected


def test_every_status_has_a_next_step() -> None:
    base = {
        "dataset_id": "ds-1",
        "bucket": "b",
        "prefix": "p/",
        "uri": "gs://b/p/",
        "route": "r",
        "reason": "",
        "updated_at": "2026-11-22T12:00:00Z",
        "version": None,
    }
    for status in DatasetStatus:
        assert "\nnext      " in describe_dataset(parse_dataset_record(base | {"status": status.value})), status
    with pytest.raises(SchemaError, match=r"dataset\.status: 'FROM_THE_FUTURE' is not one of"):
        parse_dataset_record(base | {"status": "FROM_THE_FUTURE"})  # `landfall dataset` says so, naming the field


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    args: argparse.Namespace = build_parser().parse_args(argv)
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "uri", ["landfall-landing/datasets/x/", "gs://landfall-landing", "gs://landfall-landing/", "gs:///datasets/x/"]
)
def test_a_uri_that_is_not_a_dataset_folder_is_refused(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["dataset", uri], capsys)
    assert code == 2 and out == ""
    assert (
        f"expected a dataset folder gs://BUCKET/PREFIX/ (e.g. gs://landfall-landing/datasets/mydata/), got {uri!r}"
        in err
    )


def test_reconcile_finds_the_answer_to_its_own_tick_in_the_functions_log(tmp_path: Path) -> None:
    """`landfall reconcile` waits for the pass its tick started: functions/main.py ends the outcome line with the
    message id; another tick's line (the scheduler's) is not taken for it."""
    from landfall.ticks import answer_in, tick_outcome

    def line(message: str) -> str:
        return json.dumps({"severity": "INFO", "message": message, "logger": "landfall"})

    lines = [
        line("reconcile_runs: unchanged=3 (message 41)"),
        "a line that is not JSON",
        line("reconcile_runs: long-wait=1 orphan=1 unchanged=4 (message 42)"),
    ]
    assert answer_in(lines, "reconcile_runs", "42") == "long-wait=1 orphan=1 unchanged=4"
    assert answer_in(lines, "reconcile_runs", "43") is None
    refused = line("reconcile_runs: message 44 (body sha256:ab) acknowledged without retry: bad tick")
    assert answer_in([refused], "reconcile_runs", "44") == "failed: bad tick"
    retried = line("reconcile_runs: message 45 (body sha256:cd) will be retried: Firestore unavailable")
    assert answer_in([retried], "reconcile_runs", "45") == "will be retried: Firestore unavailable"
    assert answer_in([retried, line("reconcile_runs: unchanged=1 (message 45)")], "reconcile_runs", "45") == (
        "unchanged=1"
    )  # the redelivery's pass is the last word
    log = tmp_path / "reconcile_runs.log"
    log.write_text("\n".join(lines) + "\n")
    clock = iter(range(100))
    assert (
        tick_outcome(
            log,
            "reconcile_runs",
            "41",
            5,
            start=len(lines[0]) + 1,
            sleep=lambda _s: None,
            clock=lambda: float(next(clock)),
        )
        is None
    )  # before `start`: an older pass's line
    assert tick_outcome(log, "reconcile_runs", "42", 5, sleep=lambda _s: None) == "long-wait=1 orphan=1 unchanged=4"


def test_submit_team_publishes_on_the_teams_own_topic_or_says_why_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions import wiring
    from functions.settings import get_settings
    from landfall.commands.submit import team_topic
    from landfall.errors import CommandError

    teams_file = tmp_path / "teams.toml"
    teams_file.write_text(
        '[[teams]]\nname = "vision"\nowns = [{ bucket = "*", prefix = "v/" }]\nmonthly_budget_usd = 10.0\n'
        'requests_topic = "landfall-requests-vision"\n'
        '[[teams]]\nname = "speech"\nowns = [{ bucket = "*", prefix = "s/" }]\nmonthly_budget_usd = 10.0\n'
    )
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p-1")
    monkeypatch.setenv("LANDFALL_TEAMS_FILE", str(teams_file))
    get_settings.cache_clear()
    wiring._teams_file.cache_clear()
    try:
        assert team_topic("vision") == "projects/p-1/topics/landfall-requests-vision"
        with pytest.raises(CommandError, match=r"--team speech: the team has no requests topic of its own; give it"):
            team_topic("speech")
        with pytest.raises(CommandError, match=r"--team nope: no such team in .*teams.toml \(teams: vision, speech\)"):
            team_topic("nope")
    finally:
        get_settings.cache_clear()
        wiring._teams_file.cache_clear()
