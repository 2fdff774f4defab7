"""The dashboard (landfall/ui/) following a run as a person would, in Debian's Chromium (tests/browser.py) on the
shared local stack: a dataset dropped on the own-image route (a team's container that trains nothing, so the run
costs seconds), its page opened while it runs, and the page, without a reload, shows it SUCCEEDED with its loss
curve drawn; the runs table, the datasets page and the models page (its registered version) list it; no console
error. The pages' other behaviour, with 10,000 runs, is
tests/integration/test_ui_browser.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deploy.local import stack
from landfall.synthetic import separable_csv_shards
from landfall.ui.app import create_app
from landfall.ui.source import LandfallSource
from schemas.training_request import run_id_for
from tests import browser
from tests.polling import wait_for

pytestmark = pytest.mark.e2e

PREFIX = "own-image/e2e-ui-follow/"


def _drop(bucket: Any) -> str:
    """Two CSV shards, a landfall.json that keeps the team's trainer running 4 s, then the marker; the run id."""
    for i, text in enumerate(separable_csv_shards(shards=2, rows_per_shard=50)):
        bucket.blob(f"{PREFIX}part-{i:05d}.csv").upload_from_string(text, content_type="text/csv")
    overrides = {"trainer": {"args": ["--seconds", "4"]}}
    bucket.blob(f"{PREFIX}landfall.json").upload_from_string(json.dumps(overrides))
    marker = bucket.blob(f"{PREFIX}_SUCCESS")
    marker.upload_from_string(b"")
    return run_id_for(f"gcs:{bucket.name}/{PREFIX}:{marker.generation}")


def test_a_dropped_run_is_followed_to_succeeded_with_its_curve_drawn(
    local_stack: stack.StackInfo, landing_bucket: Any, firestore_runs: Any
) -> None:
    console = browser.Console()
    with (
        browser.served(create_app(LandfallSource(local_stack.state_dir), frozenset(), poll_ms=1000)) as base,
        browser.browser() as b,
    ):
        page = console.watch(b.new_page(viewport={"width": 1400, "height": 900}))
        run_id = _drop(landing_bucket)  # the browser is up first: the page opens while the team's code runs
        wait_for(lambda: firestore_runs.document(run_id).get().exists, timeout=60, what=f"run {run_id} recorded")
        page.goto(f"{base}/runs/{run_id}")
        page.evaluate("window.notReloaded = true")
        opened_as = page.locator("#run-state").inner_text()
        page.locator("#run-state", has_text="SUCCEEDED").wait_for(timeout=90_000)
        page.locator("#curves canvas").wait_for(timeout=10_000)
        assert page.evaluate("window.notReloaded") is True, "the page was reloaded"
        assert opened_as != "SUCCEEDED", "the run ended before its page opened: nothing was followed"
        assert int(page.locator("#curves").get_attribute("data-drawn") or 0) >= 2  # the two steps it reported
        assert "train loss" in page.locator("#curves .u-legend").inner_text()
        assert "SUCCEEDED" in page.locator("#timeline").inner_text()
        # what was recorded after the page opened (plan, job, artifacts) came with the same updates
        assert "e2-standard" in page.locator("#run-facts").inner_text()
        assert "Vertex job" in page.locator("#run-links").inner_text()
        assert page.locator("table.plan tr.chosen").count() == 1
        browser.screenshot(page, "run-followed")
        page.goto(f"{base}/runs?dataset=gs://{landing_bucket.name}/{PREFIX}")
        assert page.locator("#runs-rows a").all_inner_texts() == [run_id]
        browser.screenshot(page, "runs-local-stack")
        page.goto(f"{base}/datasets")
        dataset = page.locator("tbody tr", has_text=f"gs://{landing_bucket.name}/{PREFIX}")
        assert run_id in dataset.inner_text()  # its version's run
        browser.screenshot(page, "datasets-local-stack")
        page.goto(f"{base}/models")  # the run's model, registered when it ended, read from the Vertex emulator
        page.locator("tbody tr", has_text=run_id).wait_for(timeout=5_000)
        browser.screenshot(page, "models-local-stack")
    assert console.errors == [], console.errors
