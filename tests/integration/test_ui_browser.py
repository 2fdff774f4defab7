"""The dashboard (landfall/ui/) in a real browser, Debian's Chromium driven by Playwright (tests/browser.py), over the
Firestore emulator: 10,000 runs seeded as Landfall stores them, paged and filtered, each answer under a second; a
failed run shows its reason and the trainer's line; a run's canary and fallback are on its timeline; the runs table
updates without a reload; no page logs a console error; the pages are reachable by keyboard. Screenshots of each
page go to .landfall/ui-screenshots/ (tests/browser.py SCREENSHOTS). A run dropped and followed to SUCCEEDED, its
curve drawn, is tests/e2e/test_ui_follow.py on the shared stack."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from landfall.ui.app import create_app
from landfall.ui.source import LandfallSource
from schemas.run_record import RunState
from schemas.team_ledger import RunCharge
from schemas.times import format_timestamp
from tests import browser
from tests.caches import clear_function_caches
from tests.conftest import PROJECT, Emulator
from tests.fakes.ui import TEAMS, canary_and_fallback, failed, own_code, seeded, succeeded
from tests.fakes.world import NOW
from tests.polling import wait_for

TEAMS_ENV = "LANDFALL_TEAMS_FILE"
TEAMS_FILE = Path(__file__).parents[1] / "e2e" / "teams.toml"
POLL_MS = 1000
"""How often the open pages ask for what changed here (3 s by default): the live tests wait less."""
SEEDED = 10_000
BATCH = 500
"""Documents per batched write (Firestore's limit on the writes of one commit)."""
ANSWER_S = 1.0
"""Each page and filter answers within this (docs/ui.md: under a second with 10,000 runs)."""


SEEDED_FROM = NOW + timedelta(hours=1)
"""The newest seeded run's creation time (one second between runs, older as the index grows): newer than the three
shown runs, so the first page is all seeded runs."""


def seed(collection: Any, client: Any, count: int) -> None:
    """`count` small valid run records in batched writes (the seeded() documents of tests/fakes/ui.py)."""
    for start in range(0, count, BATCH):
        batch = client.batch()
        for index in range(start, min(start + BATCH, count)):
            doc = seeded(index, SEEDED_FROM)
            batch.set(collection.document(doc["run_id"]), doc)
        batch.commit()


@pytest.fixture(scope="module")
def dashboard(firestore_emulator: Emulator) -> Iterator[tuple[str, Any]]:
    """The dashboard over the emulator holding 10,000 seeded runs and the three shown ones; (its URL, runs)."""
    import urllib.request

    from google.cloud import firestore

    from deploy.topology import load_topology

    url = f"{firestore_emulator.endpoint}/emulator/v1/projects/{PROJECT}/databases/(default)/documents"
    urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=60).close()
    saved = os.environ.get(TEAMS_ENV)
    os.environ[TEAMS_ENV] = str(TEAMS_FILE)  # the teams page lists them, at no use yet
    clear_function_caches()
    client = firestore.Client(project=PROJECT)
    runs = client.collection(load_topology().runs_collection)
    began = time.perf_counter()
    seed(runs, client, SEEDED)
    print(f"seeded {SEEDED} runs in {time.perf_counter() - began:.1f} s")
    for record in (succeeded(), failed(), canary_and_fallback(), own_code()):
        runs.document(record.run_id).set(record.to_document())
    try:
        with browser.served(create_app(LandfallSource(), frozenset(), poll_ms=POLL_MS)) as base:
            # One query first: the emulator's first query of a collection (a JVM not yet warm) is not the dashboard's.
            urllib.request.urlopen(f"{base}/runs", timeout=120).close()
            yield base, runs
    finally:
        # The emulator is the worker's for the whole session: 10,000 runs left in it, thousands of them open, made
        # every later reconcile pass on this worker page through them (the suite took minutes longer).
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=120).close()
    if saved is None:
        os.environ.pop(TEAMS_ENV, None)
    else:
        os.environ[TEAMS_ENV] = saved
    clear_function_caches()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser.browser() as launched:
        yield launched


@pytest.fixture()
def page(chromium: Any) -> Iterator[tuple[Any, browser.Console]]:
    console = browser.Console()
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    try:
        yield console.watch(context.new_page()), console
    finally:
        context.close()
    assert console.errors == [], console.errors


def timed(page: Any, action: Any) -> float:
    """Seconds from the action to the page's load (the server's answer and the browser's rendering)."""
    began = time.perf_counter()
    action()
    page.wait_for_load_state("load")
    return time.perf_counter() - began


def row_ids(page: Any) -> list[str]:
    return [str(t) for t in page.locator("#runs-rows tr td:first-child a").all_inner_texts()]


def test_ten_thousand_runs_page_and_filter(dashboard: tuple[str, Any], page: tuple[Any, browser.Console]) -> None:
    base, _ = dashboard
    p, _console = page
    took = {"first load": timed(p, lambda: p.goto(f"{base}/runs"))}
    first = row_ids(p)
    assert len(first) == 50 and first[0] == "run-seed-00000"  # newest first (the shown three are older)
    browser.screenshot(p, "runs")
    took["next page"] = timed(p, lambda: p.get_by_role("link", name="Next page").click())
    second = row_ids(p)
    assert second[0] == "run-seed-00050" and not set(first) & set(second)
    p.goto(f"{base}/runs")
    p.get_by_label("State").select_option("FAILED")
    took["state"] = timed(p, lambda: p.get_by_role("button", name="Filter").click())
    assert {s.strip() for s in p.locator("#runs-rows .badge").all_inner_texts()} == {"FAILED"}
    p.get_by_label("Team").fill(TEAMS[1])
    took["state and team"] = timed(p, lambda: p.get_by_role("button", name="Filter").click())
    rows = p.locator("#runs-rows tr")
    assert rows.count() == 50
    assert set(rows.locator("td:nth-child(6)").all_inner_texts()) == {TEAMS[1]}
    browser.screenshot(p, "runs-filtered")
    p.goto(f"{base}/runs?dataset=gs://landfall-landing/datasets/seed-7/")
    took["dataset"] = timed(p, lambda: p.get_by_role("button", name="Filter").click())
    assert set(p.locator("#runs-rows td:nth-child(5)").all_inner_texts()) == {"gs://landfall-landing/datasets/seed-7/"}
    p.get_by_label("Since").fill(format_timestamp(SEEDED_FROM - timedelta(minutes=1)))
    took["dataset and since"] = timed(p, lambda: p.get_by_role("button", name="Filter").click())
    assert 1 <= p.locator("#runs-rows tr").count() <= 3  # seed-7 every 20 s in the last minute: 7, 27, 47
    # The times are printed, not asserted: a test shares two cores with the rest of the suite, so the 1 s target is
    # shown by the benchmark on a quiet machine (`make bench-ui`, docs/benchmarks.md), which prints each against it.
    print(f"dashboard with 10,000 runs, seconds (target {ANSWER_S}):", {k: round(v, 3) for k, v in took.items()})


def test_the_runs_table_updates_without_a_reload(dashboard: tuple[str, Any], page: tuple[Any, browser.Console]) -> None:
    base, runs = dashboard
    p, _ = page
    p.goto(f"{base}/runs?team=maps&state=RUNNING")
    p.evaluate("window.notReloaded = true")
    newest = replace(
        canary_and_fallback("run-ui-live"),
        team=RunCharge("maps"),
        created_at=format_timestamp(SEEDED_FROM),
        state=RunState.RUNNING,
    )
    runs.document(newest.run_id).set(newest.to_document())
    p.locator("#runs-rows a", has_text="run-ui-live").wait_for(timeout=15_000)
    assert p.evaluate("window.notReloaded") is True
    assert row_ids(p)[0] == "run-ui-live"


def test_a_failed_run_shows_its_reason_and_the_trainers_line(
    dashboard: tuple[str, Any], page: tuple[Any, browser.Console]
) -> None:
    base, _ = dashboard
    p, _ = page
    p.goto(f"{base}/runs?team=research&state=FAILED")
    p.get_by_role("link", name="run-ui-failed").click()
    assert p.locator("#failure-reason").inner_text() == "out-of-memory"
    assert "OutOfMemoryError, at step 120" in p.locator(".failure").inner_text()
    browser.screenshot(p, "run-failed")


def test_the_canary_and_the_fallback_are_on_the_timeline(
    dashboard: tuple[str, Any], page: tuple[Any, browser.Console]
) -> None:
    base, _ = dashboard
    p, _ = page
    p.goto(f"{base}/runs/run-ui-canary")
    timeline = p.locator("#timeline")
    assert "passed" in timeline.locator("tr.event-canary").inner_text()
    assert "europe-west4" in timeline.locator("tr.event-fallback").inner_text()
    assert "stockout" in timeline.locator("tr.event-job-ended").inner_text()
    canary = p.get_by_role("table").filter(has_text="Canary measured")
    assert "0.26" in canary.inner_text() and "0.25" in canary.inner_text()
    browser.screenshot(p, "run-canary-fallback")


def test_a_succeeded_runs_curves_are_drawn_and_labelled(
    dashboard: tuple[str, Any], page: tuple[Any, browser.Console]
) -> None:
    base, _ = dashboard
    p, _ = page
    p.goto(f"{base}/runs/run-ui-succeeded")
    p.locator("#curves canvas").wait_for()
    assert p.locator("#curves").get_attribute("data-drawn") == "5"
    legend = p.locator("#curves .u-legend").inner_text()
    assert "validation loss" in legend and "validation accuracy" in legend
    assert "alternatives" not in p.locator("table.plan").inner_text() and p.locator("table.plan tr.chosen").count() == 1
    browser.screenshot(p, "run-succeeded")


def test_a_scripts_run_names_its_code_and_draws_a_curve_per_figure_it_reported(
    dashboard: tuple[str, Any], page: tuple[Any, browser.Console]
) -> None:
    base, _ = dashboard
    p, _ = page
    p.goto(f"{base}/runs/run-ui-own-code")
    p.locator("#curves canvas").wait_for()
    assert p.locator("#run-code").inner_text() == "script train.py"
    assert p.locator("#curves").get_attribute("data-drawn") == "2"
    legend = p.locator("#curves .u-legend").inner_text()
    assert "loss" in legend and "accuracy" in legend and "test_loss" in legend
    browser.screenshot(p, "run-own-code")


def test_every_page_loads_clean_and_is_reachable_by_keyboard(
    dashboard: tuple[str, Any], page: tuple[Any, browser.Console]
) -> None:
    base, _ = dashboard
    p, _ = page
    for slug in ("datasets", "models", "teams", "dead-letters"):
        p.goto(f"{base}/{slug}")
        assert p.locator("h1").count() == 1
        browser.screenshot(p, slug)
        if slug == "teams":
            assert p.locator("tbody tr").all_inner_texts()[0].startswith("e2e-capped")
            assert "all 0/1" in p.locator("tbody tr").first.inner_text()  # its GPU cap, none in flight
    p.goto(f"{base}/runs")
    p.keyboard.press("Tab")
    assert p.evaluate("document.activeElement.textContent") == "Skip to content"
    p.keyboard.press("Enter")
    assert p.evaluate("document.activeElement.id") == "main"
    p.keyboard.press("Tab")
    focused = p.evaluate("document.activeElement.tagName + ':' + (document.activeElement.labels?.[0]?.innerText || '')")
    assert focused.startswith("SELECT:State"), focused  # the first control in main is the labelled state filter
    unlabelled = p.evaluate(
        "[...document.querySelectorAll('input, select')].filter(e => !e.labels || !e.labels.length).length"
    )
    assert unlabelled == 0
    wait_for(lambda: p.locator("#updated").inner_text().startswith("updated"), timeout=15, what="a live update")


def test_landfall_ui_prints_its_url_and_serves_the_runs(dashboard: tuple[str, Any], tmp_path: Path) -> None:
    """The command as a person types it: `landfall ui --port N` prints the URL, which answers with the runs."""
    import subprocess
    import sys
    import urllib.request

    from deploy.local import processes

    port = processes.free_port()
    env = {**os.environ, "LANDFALL_STATE_DIR": str(tmp_path)}  # no local stack's env file: the emulator's variables
    proc = subprocess.Popen(
        [sys.executable, "-m", "landfall.cli", "ui", "--port", str(port)],
        cwd=Path(__file__).parents[2],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(f"Landfall dashboard: http://127.0.0.1:{port}/"), (line, proc.stderr)

        def answered() -> str | None:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/runs?state=FAILED&team=research", timeout=30
                ) as r:
                    return str(r.read().decode())
            except OSError:
                return None

        assert "run-ui-failed" in wait_for(answered, timeout=60, what="landfall ui to answer")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_allowed_cancel_asks_first_then_cancels_through_the_clis_code(
    dashboard: tuple[str, Any], page: tuple[Any, browser.Console]
) -> None:
    """LANDFALL_UI_ACTIONS=cancel: a WAITING run (no job) is cancelled from its page after a confirmation, by
    `landfall cancel`'s own code, in Firestore; the read-only dashboard of the other tests offers no button."""
    base, runs = dashboard
    p, _ = page
    run_id = "run-seed-00008"  # WAITING (tests/fakes/ui.py SEED_STATES), no Vertex job
    p.goto(f"{base}/runs/{run_id}")
    assert p.get_by_role("link", name="Cancel this run…").count() == 0
    with browser.served(create_app(LandfallSource(), frozenset({"cancel"}))) as acting:
        p.goto(f"{acting}/runs/{run_id}")
        p.get_by_role("link", name="Cancel this run…").click()
        assert runs.document(run_id).get().get("state") == "WAITING"  # asked, not done
        browser.screenshot(p, "cancel-confirm")
        p.get_by_role("button", name="Yes, cancel it").click()
        assert "CANCELLED" in p.get_by_role("status").inner_text()  # what `landfall cancel` prints
        assert runs.document(run_id).get().get("state") == "CANCELLED"
        p.get_by_role("link", name="Back to the run").click()
        assert p.locator("#run-state").inner_text() == "CANCELLED"
        assert p.locator("#failure-reason").inner_text() == "cancelled"


def test_a_member_sees_only_their_teams_runs_and_cannot_cancel_another_teams(
    dashboard: tuple[str, Any], page: tuple[Any, browser.Console], tmp_path: Path
) -> None:
    """With members in the teams file, the dashboard as user:ana (team vision's member) lists only vision's runs,
    opens one, and refuses to show or cancel a speech run (403, the run left as it was)."""
    import tomllib
    import urllib.error
    import urllib.request

    from deploy.teams import parse_teams

    _, runs = dashboard
    p, _ = page
    teams = parse_teams(
        tomllib.loads(
            '[[teams]]\nname = "vision"\nowns = [{bucket = "*", prefix = "datasets/vision/"}]\n'
            'monthly_budget_usd = 100.0\nmembers = ["user:ana@example.com"]\n'
            '[[teams]]\nname = "speech"\nowns = [{bucket = "*", prefix = "datasets/speech/"}]\n'
            'monthly_budget_usd = 100.0\nmembers = ["user:bo@example.com"]\n'
        )
    )
    app = create_app(LandfallSource(), frozenset({"cancel"}), access=lambda: teams, identity="user:ana@example.com")
    with browser.served(app) as scoped:
        p.goto(f"{scoped}/runs")
        rows = p.locator("#runs-rows tr")
        assert rows.count() == 50 and set(rows.locator("td:nth-child(6)").all_inner_texts()) == {"vision"}
        browser.screenshot(p, "runs-as-member")
        p.goto(f"{scoped}/runs/run-seed-00000")  # vision's (tests/fakes/ui.py: teams cycle from vision)
        assert p.locator("#run-state").count() == 1
        speech = "run-seed-00001"
        before = runs.document(speech).get().get("state")
        try:
            urllib.request.urlopen(f"{scoped}/runs/{speech}", timeout=30)
            raise AssertionError("team speech's run was shown to team vision's member")
        except urllib.error.HTTPError as exc:
            assert exc.code == 403 and "team &#39;speech&#39;" in exc.read().decode()
        host = scoped.removeprefix("http://")
        post = urllib.request.Request(
            f"{scoped}/runs/{speech}/cancel",
            data=b"",
            method="POST",
            headers={"Origin": scoped, "Host": host, "Sec-Fetch-Site": "same-origin"},
        )
        try:
            urllib.request.urlopen(post, timeout=30)
            raise AssertionError("team vision's member cancelled team speech's run")
        except urllib.error.HTTPError as exc:
            assert exc.code == 403 and "user:ana@example.com (member of vision)" in exc.read().decode()
        assert runs.document(speech).get().get("state") == before
