"""The reload rule for the routes and teams files (deploy/reloading.py): an edit is seen by the next read after the
check interval, an unchanged file is not parsed again, a broken edit keeps the last good value and says why."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from deploy.reloading import ReloadingFile
from deploy.routes import Route, RouteError, read_routes

ROUTE = """
[[routes]]
name = "{name}"
bucket = "landing"
prefix = "{prefix}"
task = "tabular-classification"
model_preset = "mlp-small"
readiness = ["marker"]
"""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _write(path: Path, text: str, bump: int) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 1_000_000_000))  # coarse clocks: a distinct mtime


def test_an_edit_is_seen_after_the_interval_and_a_broken_edit_keeps_the_last_good(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    file = tmp_path / "routes.toml"
    _write(file, ROUTE.format(name="old", prefix="a/"), 0)
    parses: list[str] = []

    def parse(path: object) -> tuple[Route, ...]:
        parses.append(str(path))
        return read_routes(file)

    clock = Clock()
    routes = ReloadingFile(parse, (RouteError,), interval=1.0, clock=clock)
    assert [r.name for r in routes.read(file)] == ["old"]
    assert len(parses) == 1
    clock.now += 5
    routes.read(file)
    assert len(parses) == 1, "an unchanged file is not parsed again"

    _write(file, ROUTE.format(name="new", prefix="b/"), 10)
    clock.now += 0.5
    assert [r.name for r in routes.read(file)] == ["old"], "within the interval the held value stands"
    clock.now += 1
    assert [r.name for r in routes.read(file)] == ["new"]

    _write(file, ROUTE.format(name="broken", prefix="no-slash"), 20)
    clock.now += 2
    with caplog.at_level(logging.ERROR, logger="landfall.config"):
        assert [r.name for r in routes.read(file)] == ["new"]
        clock.now += 2
        routes.read(file)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, "one error per bad edit"
    assert str(file) in errors[0] and "must end in '/'" in errors[0] and "last good" in errors[0]

    _write(file, ROUTE.format(name="fixed", prefix="c/"), 30)
    clock.now += 2
    assert [r.name for r in routes.read(file)] == ["fixed"]


def test_a_file_that_never_parsed_raises(tmp_path: Path) -> None:
    file = tmp_path / "routes.toml"
    file.write_text("[[routes]\n")
    with pytest.raises(RouteError, match=r"routes\.toml"):
        ReloadingFile(read_routes, (RouteError,)).read(file)


def test_the_functions_routes_and_teams_follow_their_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from functions import wiring
    from functions.ingest import routes
    from functions.settings import get_settings

    routes_file, teams_file = tmp_path / "routes.toml", tmp_path / "teams.toml"
    _write(routes_file, ROUTE.format(name="old", prefix="a/"), 0)
    _write(teams_file, "", 0)
    monkeypatch.setenv("LANDFALL_ROUTES_FILE", str(routes_file))
    monkeypatch.setenv("LANDFALL_TEAMS_FILE", str(teams_file))
    get_settings.cache_clear()
    routes.load_routes.cache_clear()
    wiring._teams_file.cache_clear()
    try:
        assert routes.route_for("landing", "b/x/data.csv") is None
        assert not wiring.teams()
        _write(routes_file, ROUTE.format(name="old", prefix="a/") + ROUTE.format(name="new", prefix="b/"), 10)
        _write(
            teams_file,
            '[[teams]]\nname = "vision"\nowns = [{ bucket = "landing", prefix = "b/" }]\nmonthly_budget_usd = 10.0\n',
            10,
        )
        monkeypatch.setattr(routes.load_routes, "_interval", 0.0)
        monkeypatch.setattr(wiring._teams_file(), "_interval", 0.0)
        found = routes.route_for("landing", "b/x/data.csv")
        assert found is not None and found.name == "new"
        assert [t.name for t in wiring.teams().teams] == ["vision"]
    finally:
        get_settings.cache_clear()
        routes.load_routes.cache_clear()
        wiring._teams_file.cache_clear()


def test_the_dispatcher_s_route_check_follows_the_file_as_ingest_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A route added while the functions run: ingest labels its requests with it, and the dispatcher, which checks
    that label against the route owning the data, must see the same routes (not the ones it read first)."""
    from dataclasses import replace

    from functions.dispatch import request_rules
    from functions.settings import settings_from_env
    from schemas.training_request import parse_training_request

    routes_file = tmp_path / "routes.toml"
    _write(routes_file, ROUTE.format(name="old", prefix="a/"), 0)
    settings = replace(settings_from_env({"GOOGLE_CLOUD_PROJECT": "p"}), routes_file=str(routes_file))
    request = parse_training_request(
        {
            "idempotency_key": "k",
            "dataset": {"uri": "gs://landing/b/x/"},
            "task": "tabular-classification",
            "model": {"preset": "mlp-small"},
            "labels": {"landfall-route": "new"},
        }
    )
    monkeypatch.setattr(request_rules._ROUTES, "_interval", 0.0)
    assert request_rules.label_problems(request, settings), "no route owns b/ yet"
    _write(routes_file, ROUTE.format(name="old", prefix="a/") + ROUTE.format(name="new", prefix="b/"), 10)
    assert request_rules.label_problems(request, settings) == []
