"""The dashboard's pages (landfall/ui/) over a fake Source: what each shows, its filters and paging, and that cancel
and retry are offered only where LANDFALL_UI_ACTIONS allows, behind a confirmation. The browser tests
(tests/integration/test_ui_browser.py) show the same against the emulators."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import pytest

from landfall.errors import CommandError
from landfall.ui import views
from landfall.ui.app import create_app
from landfall.ui.hosts import LOOPBACK, allowed_hosts, host_allowed
from landfall.ui.source import allowed_actions
from schemas.run_record import ReconcileErrors, RunState, parse_run_record
from tests.fakes.ui import FakeSource, canary_and_fallback, failed, own_code, seeded, succeeded

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's notice that a later httpx is preferred
    from starlette.testclient import TestClient


def client(
    source: FakeSource, actions: frozenset[str] = frozenset(), hosts: tuple[str, ...] | None = None
) -> TestClient:
    """The app as `landfall ui` serves it by default: opened as 127.0.0.1 (LANDFALL_UI_HOSTS unset)."""
    return TestClient(create_app(source, actions, hosts=hosts or LOOPBACK), base_url="http://127.0.0.1:8090")


def _line(message: str, second: int, **fields: object) -> str:
    return json.dumps({"message": message, "time": f"2026-11-22T12:00:{second:02d}.000000Z", **fields})


def test_the_runs_table_shows_state_reason_team_machine_costs_and_times() -> None:
    page = client(FakeSource([succeeded(), failed()])).get("/runs").text
    assert "run-ui-succeeded" in page and "run-ui-failed" in page
    assert "out-of-memory" in page and "research" in page
    assert "$0.05" in page and "$0.04" in page and "5m 00s" in page and "4m 00s" in page


def test_filters_reach_the_query_and_bad_ones_say_what_was_expected() -> None:
    c = client(FakeSource([succeeded(), failed()]))
    page = c.get("/runs", params={"state": "failed"}).text
    assert "run-ui-failed" in page and "run-ui-succeeded" not in page
    assert "run-ui-succeeded" in c.get("/runs", params={"team": "vision"}).text
    assert "run-ui-failed" not in c.get("/runs", params={"team": "vision"}).text
    bad = c.get("/runs", params={"state": "DONE"})
    assert bad.status_code == 400 and "the states are" in bad.text
    assert "RFC 3339" in c.get("/runs", params={"since": "yesterday"}).text


def test_pages_follow_on_from_the_last_run_of_the_page() -> None:
    runs = [parse_run_record(seeded(i)) for i in range(views.PAGE_SIZE + 5)]
    c = client(FakeSource(runs))
    first = c.get("/runs").text
    assert "run-seed-00049" in first and "run-seed-00050" not in first
    assert 'href="/runs?after=run-seed-00049"' in first
    second = c.get("/runs", params={"after": "run-seed-00049"}).text
    assert "run-seed-00050" in second and "run-seed-00054" in second and "run-seed-00049" not in second
    assert "Next page" not in second
    assert "run-seed-00000" in c.get("/runs/rows").text  # what the page polls for its live rows


def test_a_failed_run_shows_its_reason_and_the_trainers_line() -> None:
    page = client(FakeSource([failed()])).get("/runs/run-ui-failed").text
    assert 'id="failure-reason">out-of-memory' in page
    assert "OutOfMemoryError, at step 120" in page and "exit code 1" in page


def test_the_timeline_shows_the_canary_the_ended_job_and_the_fallback() -> None:
    events = views.timeline(canary_and_fallback())
    kinds = [e.kind for e in events]
    assert kinds.index("canary") < kinds.index("job ended") < kinds.index("fallback")
    assert "europe-west4" in next(e.text for e in events if e.kind == "fallback")
    rows = views.canary_rows(canary_and_fallback())
    assert ("step time (s)", "0.25", "0.26") in rows


def test_the_plan_table_marks_the_chosen_plan_and_says_why_each_alternative_lost() -> None:
    run = succeeded()
    assert run.plan is not None and run.plan.alternatives
    rows = views.plan_rows(run.plan)
    assert rows[0].chosen and len(rows) == len(run.plan.alternatives) + 1
    assert [r.why for r in rows[1:]] == [a.reason for a in run.plan.alternatives]


def test_curves_are_labelled_train_and_held_out_while_training_then_from_metrics() -> None:
    lines = [
        _line("training", 1, step=1, loss=0.9),
        _line("training", 2, step=2, loss=0.7),
        _line("epoch finished", 3, step=2, epoch=1, loss=0.75, accuracy=0.6, evaluated_on="validation"),
    ]
    live = views.curves_from_logs(lines).to_dict()
    assert live["labels"] == ["train loss", "validation loss", "validation accuracy"]
    assert live["data"] == [[1.0, 2.0], [0.9, 0.7], [None, 0.75], [None, 0.6]]
    running = replace(succeeded(), state=RunState.RUNNING, metrics=None)
    assert views.run_curves(running, lines).x_label == "step"
    ended = views.run_curves(succeeded(), lines).to_dict()
    assert ended["x_label"] == "epoch" and ended["labels"] == ["validation loss", "validation accuracy"]


def test_throughput_and_eta_while_it_trains() -> None:
    lines = [
        _line("training started", 0, step=0, total_steps=10),
        _line("training", 2, step=2, loss=0.9, total_steps=10),
        _line("training", 4, step=4, loss=0.8, total_steps=10),
    ]
    running = replace(succeeded(), state=RunState.RUNNING)
    assert "step 4/10" in views.progress(running, lines) and "ETA 6s" in views.progress(running, lines)
    assert views.progress(succeeded(), []) == "samples/s 812.5, wall s 240"


def test_a_read_only_dashboard_offers_no_action_and_refuses_one() -> None:
    source = FakeSource([canary_and_fallback()])
    c = client(source)
    assert "Cancel this run" not in c.get("/runs/run-ui-canary").text
    refused = c.post("/runs/run-ui-canary/cancel")
    assert refused.status_code == 403 and "LANDFALL_UI_ACTIONS" in refused.text
    assert source.cancelled == []


def test_an_allowed_cancel_asks_first_then_calls_the_clis_cancel() -> None:
    source = FakeSource([canary_and_fallback(), failed()])
    c = client(source, frozenset({"cancel"}))
    assert 'href="/runs/run-ui-canary/cancel"' in c.get("/runs/run-ui-canary").text
    asked = c.get("/runs/run-ui-canary/cancel")
    assert "Yes, cancel it" in asked.text and source.cancelled == []
    assert "cancel requested" in c.post("/runs/run-ui-canary/cancel").text
    assert source.cancelled == ["run-ui-canary"]
    assert "Retry this run" not in c.get("/runs/run-ui-failed").text  # retry not allowed here
    forged = c.post(
        "/runs/run-ui-canary/cancel", headers={"Origin": "https://elsewhere.example", "Sec-Fetch-Site": "cross-site"}
    )
    assert forged.status_code == 403 and source.cancelled == ["run-ui-canary"]


def test_the_actions_variable_names_known_actions_only() -> None:
    assert allowed_actions({"LANDFALL_UI_ACTIONS": " Cancel, retry "}) == {"cancel", "retry"}
    assert allowed_actions({}) == frozenset()
    with pytest.raises(CommandError, match="the dashboard's actions are cancel, retry"):
        allowed_actions({"LANDFALL_UI_ACTIONS": "delete"})


def test_a_missing_run_is_a_404_that_says_so() -> None:
    answer = client(FakeSource([])).get("/runs/run-nope")
    assert answer.status_code == 404 and "no run &#39;run-nope&#39;" in answer.text


def test_the_teams_page_shows_use_against_caps_and_budget() -> None:
    page = client(FakeSource([])).get("/teams").text
    assert "all 2/2" in page and "$65.00" in page and "$100.00" in page and "65%" in page
    assert 'class="at-limit"' in page and 'href="/runs?team=vision"' in page


def test_a_split_name_that_is_not_a_word_is_not_written_into_the_page() -> None:
    lines = [_line("epoch finished", 1, step=1, loss=0.5, evaluated_on="</script><script>alert(1)</script>")]
    running = replace(succeeded(), state=RunState.RUNNING, metrics=None)
    page = client(FakeSource([running], {running.run_id: lines})).get(f"/runs/{running.run_id}").text
    assert "<script>alert" not in page and '"labels": ["held-out loss"]' in page  # text elsewhere is escaped


class Unreachable(FakeSource):
    def models(self) -> list[object]:
        raise CommandError("cannot reach Vertex AI")

    def dead_letters(self) -> tuple[str, list[object]]:
        raise CommandError("cannot reach Pub/Sub")


def test_a_part_that_cannot_be_read_says_so_and_claims_no_emptiness() -> None:
    c = client(Unreachable([]))
    models = c.get("/models").text
    assert "Could not read everything this page shows: cannot reach Vertex AI" in models
    assert "No models yet" not in models and "Not read (above)." in models
    letters = c.get("/dead-letters").text
    assert "cannot reach Pub/Sub" in letters and "No dead letters." not in letters and "No orphan jobs." in letters


def test_every_page_answers() -> None:
    c = client(FakeSource([succeeded()]))
    for path in ("/", "/datasets", "/models", "/teams", "/dead-letters", "/static/vendor/uplot/uPlot.iife.min.js"):
        assert c.get(path).status_code == 200, path


def _strict_json(text: str) -> object:
    """JSON as a browser's JSON.parse reads it: NaN and Infinity are not JSON."""

    def refuse(token: str) -> object:
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


REBOUND = {"Host": "rebound.example:8090", "Origin": "http://rebound.example:8090", "Sec-Fetch-Site": "same-origin"}
"""A page served from a name its owner rebound to 127.0.0.1: same-origin with itself, on no list of the dashboard."""


@pytest.mark.parametrize(
    ("headers", "hosts", "taken"),
    [
        ({}, None, True),
        ({"Origin": "http://127.0.0.1:8090"}, None, True),
        ({"Host": "localhost:8090", "Origin": "http://localhost:8090"}, None, True),
        (REBOUND, None, False),
        ({"Origin": "http://rebound.example:8090"}, None, False),
        ({"Origin": "null"}, None, False),
        ({"Host": "rebound.example"}, None, False),
        # deployed: Cloud Run's name as Host, the page opened through `gcloud run services proxy` on localhost
        (
            {"Host": "landfall-ui-123456.us-central1.run.app", "Origin": "http://localhost:8080"},
            ("landfall-ui-*.run.app", *LOOPBACK),
            True,
        ),
        ({"Host": "other-123456.us-central1.run.app"}, ("landfall-ui-*.run.app", *LOOPBACK), False),
        ({"Host": "127.0.0.1:9000"}, ("127.0.0.1:8090",), False),
    ],
)
def test_a_post_is_taken_only_when_host_and_origin_are_the_dashboards_configured_names(
    headers: dict[str, str], hosts: tuple[str, ...] | None, taken: bool
) -> None:
    source = FakeSource([canary_and_fallback()])
    answer = client(source, frozenset({"cancel"}), hosts).post("/runs/run-ui-canary/cancel", headers=headers)
    assert (answer.status_code, source.cancelled) == ((200, ["run-ui-canary"]) if taken else (403, [])), answer.text
    if not taken:
        assert "LANDFALL_UI_HOSTS" in answer.text


def test_the_hosts_variable_defaults_to_loopback_and_refuses_what_is_not_a_name() -> None:
    assert allowed_hosts({}) == LOOPBACK == allowed_hosts({"LANDFALL_UI_HOSTS": " "})
    named = allowed_hosts({"LANDFALL_UI_HOSTS": "Dash.Example.com:8443, localhost"})
    assert named == ("dash.example.com:8443", "localhost")
    assert host_allowed("[::1]:8090", LOOPBACK) and not host_allowed("[::2]:8090", LOOPBACK)
    for bad in ("http://dash.example.com", "dash.example.com/x", "*", "a b"):
        with pytest.raises(CommandError, match="is not a host name"):
            allowed_hosts({"LANDFALL_UI_HOSTS": bad})


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("/runs?after=a/b", "after"),
        ("/runs/rows?after=a/b", "after"),
        ("/runs?after=__name__", "after"),
        ("/runs?state=DONE", "state"),
        ("/runs?team=Vision%20Team", "team"),
        ("/runs?dataset=landing/datasets/ui/", "dataset"),
        ("/runs?since=yesterday", "since"),
        ("/runs?sort=cost", "sort"),
        ("/runs/__name__", "run id"),
        ("/api/runs/run%20x", "run id"),
        ("/runs/run%3Bx/cancel", "run id"),
    ],
)
def test_every_parameter_is_checked_and_a_bad_one_is_a_400_naming_it(path: str, named: str) -> None:
    answer = client(FakeSource([succeeded()]), frozenset({"cancel"})).get(path)
    assert answer.status_code == 400 and f"{named}: " in answer.text, (path, answer.status_code, answer.text[:300])


def test_a_run_whose_loss_went_nan_renders_its_page_and_its_api_as_json() -> None:
    lines = [
        _line("training", 1, step=1, loss=0.9),
        _line("training", 2, step=2, loss=float("nan")),
        _line("training", 3, step=3, loss=float("inf")),
        _line("epoch finished", 3, step=3, loss=float("-inf"), accuracy=float("nan"), evaluated_on="validation"),
    ]
    running = replace(succeeded(), state=RunState.RUNNING, metrics=None)
    c = client(FakeSource([running], {running.run_id: lines}))
    page = c.get(f"/runs/{running.run_id}")
    assert page.status_code == 200
    embedded = page.text.split('id="curves-data">', 1)[1].split("</script>", 1)[0]
    assert _strict_json(embedded) == {"x_label": "step", "labels": ["train loss"], "data": [[1.0], [0.9]]}
    api = c.get(f"/api/runs/{running.run_id}")
    assert api.status_code == 200 and _strict_json(api.text)
    ended = succeeded()
    assert ended.metrics is not None
    ended.metrics["epochs"][1]["loss"] = float("nan")
    answer = client(FakeSource([ended])).get(f"/api/runs/{ended.run_id}")
    curves = _strict_json(answer.text)["curves"]  # type: ignore[index]
    assert answer.status_code == 200 and curves["data"][1][1] is None  # a gap where the loss went NaN


def test_a_run_the_reconciler_could_not_reconcile_says_so_on_its_page() -> None:
    run = replace(
        canary_and_fallback(),
        reconcile_errors=ReconcileErrors(
            3, "TransientError: Vertex unavailable", "2026-11-22T12:01:00Z", "2026-11-22T12:03:00Z"
        ),
    )
    said = "failed on 3 passes in a row (2026-11-22T12:01:00Z to 2026-11-22T12:03:00Z); last: TransientError"
    source = FakeSource([run, replace(run, run_id="run-ui-unreadable")])
    assert said in client(source).get(f"/runs/{run.run_id}").text
    source.docs[1]["cost"] = {"estimated_usd": "a lot"}  # the reader refuses it: listed as skipped, with its mark
    listed = client(source).get("/runs").text
    assert "run &#39;run-ui-unreadable&#39; does not fit the run record schema" in listed and said in listed


def test_the_models_page_shows_the_decision_its_run_records_after_a_promote() -> None:
    """A version uploaded as `kept` and then promoted by hand: Model Registry still holds the upload's decision,
    the run holds the one that stands."""
    from schemas.model_version import RUN_LABEL, ModelVersionRef, Promotion, VersionView

    model = "projects/p/locations/us-central1/models/landfall-iris"
    promoted = Promotion(decision="manual-promote", reason="promoted by hand", at="2026-11-22T12:09:00.000000Z")
    run = replace(succeeded(), model=ModelVersionRef(model, "2", "2026-11-22T12:08:00.000000Z", promoted))
    source = FakeSource([run])
    uploaded = {"promotion": {"decision": "kept", "reason": "below the champion"}}
    source.versions = [
        VersionView(model, "2", labels={RUN_LABEL: run.run_id}, metadata=uploaded),
        VersionView(model, "3", labels={RUN_LABEL: "run-not-recorded"}, metadata=uploaded),
    ]
    rows = [r.split("</td>") for r in client(source).get("/models").text.split("<tr><td>")[1:]]
    assert [(r[1].removeprefix("<td>"), r[4].removeprefix("<td>")) for r in rows] == [
        ("2", "manual-promote"),
        ("3", "kept"),
    ]


def test_a_scripts_run_shows_its_code_its_figures_and_a_curve_per_figure() -> None:
    """Every numeric per-epoch figure the script reported is a curve under its own name, not only the training
    loss; the runs table and the page name the script and show its headline and final figures."""
    run = own_code()
    c = client(FakeSource([run, succeeded()]))
    table = c.get("/runs").text
    row = table.split(f'href="/runs/{run.run_id}"', 1)[1].split("</tr>", 1)[0]
    assert "<td>script train.py</td>" in row and "<td>accuracy 0.85</td>" in row
    assert "<td>built-in</td>" in table
    page = c.get(f"/runs/{run.run_id}").text
    assert '<dd id="run-code">script train.py</dd>' in page
    assert '<dd id="run-figures">loss 0.5, accuracy 0.85, test_loss 0.45</dd>' in page
    embedded = json.loads(page.split('id="curves-data">', 1)[1].split("</script>", 1)[0])
    assert embedded["x_label"] == "epoch"
    assert dict(zip(embedded["labels"], embedded["data"][1:], strict=True)) == {
        "loss": [0.9, 0.5],
        "accuracy": [0.7, 0.85],
        "test_loss": [0.8, 0.45],
    }


def test_a_scripts_hostile_figures_leave_its_pages_valid() -> None:
    bad = {"epoch": 1, "loss": float("nan"), "<b>x</b>": 1.0, **{f"f{i:04d}": float(i) for i in range(3000)}}
    run = replace(
        own_code(), metrics={"trainer": "script", "final": bad, "epochs": [bad, {"epoch": 2, "f0001": 1e400}]}
    )
    c = client(FakeSource([run]))
    assert c.get("/runs").status_code == 200
    page = c.get(f"/runs/{run.run_id}")
    assert page.status_code == 200 and "<b>x</b>" not in page.text
    curves = _strict_json(c.get(f"/api/runs/{run.run_id}").text)["curves"]  # type: ignore[index]
    assert "loss" not in curves["labels"] and len(curves["labels"]) < views.PAGE_SIZE
