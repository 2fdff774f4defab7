"""A team's own code is shown like the built-in trainer: `landfall runs` (CODE and a METRIC by landfall/figures.py's
headline rule), `landfall run` (its code and every final figure) and `landfall run --metrics` (every per-epoch
figure), from the metrics lines its script appended; hostile figures (NaN, Infinity, past 64 bits, thousands of
fields, odd names) are left out, never an error."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

import pytest

from landfall.commands import runs
from landfall.figures import FIELDS_READ, FIGURES_SHOWN, headline_figures
from landfall.words import code_text, figures_text, final_figures_text
from schemas.model_version import ModelVersionRef, Promotion
from schemas.money import usd_text
from schemas.run_record import RunRecord
from schemas.user_metrics import EPOCH_FIELDS, metrics_document
from tests.fakes.ui import own_code, succeeded


def _runs_table(docs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setattr(runs, "recent_runs", lambda *_args, **_kwargs: docs)
    runs.cmd_runs(argparse.Namespace(state=None, limit=50, dataset=None, since=None, json=False))
    return capsys.readouterr().out


def _column(table: str, name: str, row: int) -> str:
    """The text of column `name` in the row-th row under the header (columns are as wide as their header or more)."""
    header, _rule, *rows = table.splitlines()
    start = header.index(name)
    following = [header.index(h, start + 1) for h in header[start + len(name) :].split() if h]
    end = following[0] if following else None
    return rows[row][start:end].strip()


def test_the_runs_table_shows_a_scripts_name_and_its_headline_figure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _runs_table([own_code().to_dict(), succeeded().to_dict()], monkeypatch, capsys)
    assert _column(table, "CODE", 0) == "script train.py" and _column(table, "METRIC", 0) == "accuracy 0.85"
    assert _column(table, "CODE", 1) == "built-in" and _column(table, "METRIC", 1) == "accuracy 0.75"


def test_landfall_run_shows_the_code_and_every_final_figure_it_reported() -> None:
    text = runs.describe(own_code())
    assert "\ncode      script train.py\n" in text
    assert "\nmetrics   loss 0.5, accuracy 0.85, test_loss 0.45\n" in text, text


def test_landfall_run_metrics_is_the_per_epoch_table_of_every_figure_the_script_reported() -> None:
    text = runs.describe_metrics(own_code())
    assert text.splitlines()[:4] == [
        "EPOCH  LOSS  ACCURACY  STEP  TEST LOSS",
        "-----  ----  --------  ----  ---------",
        "1      0.9   0.7       1     0.8",
        "2      0.5   0.85      2     0.45",
    ]
    assert "final: loss 0.5, accuracy 0.85, test_loss 0.45" in text


def test_lines_without_an_epoch_give_no_table_and_say_how_to_get_one() -> None:
    run = own_code(lines=[{"step": 1, "loss": 0.9, "accuracy": 0.6}, {"step": 2, "loss": 0.4, "accuracy": 0.8}])
    text = runs.describe_metrics(run)
    assert "holds no per-epoch figures" in text and "carries an `epoch` number" in text
    assert "final: loss 0.4, accuracy 0.8" in text
    assert figures_text(run) == "accuracy 0.8"


def _with(final: dict[str, Any], metric: str = "", task: str | None = None) -> RunRecord:
    run = own_code()
    request = run.request | ({"task": task} if task else {})
    promotion = Promotion(decision="kept", reason="r", at="2026-11-22T12:00:00.000000Z", metric=metric)
    model = ModelVersionRef("projects/p/locations/r/models/m", "1", "2026-11-22T12:00:00.000000Z", promotion)
    return replace(run, request=request, metrics={"final": final}, model=model if metric else None)


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (_with({"accuracy": 0.9, "f1": 0.7}, metric="f1"), [("f1", 0.7)]),
        (_with({"accuracy": 0.9}, metric="f1"), [("accuracy", 0.9)]),
        (_with({"loss": 0.4, "r2": 0.5, "rmse": 3.0}, task="tabular-regression"), [("R²", 0.5), ("RMSE", 3.0)]),
        (_with({"loss": 0.4, "test_loss": 0.5, "val_loss": 0.6}), [("val_loss", 0.6)]),
        (_with({"loss": 0.4, "test_loss": 0.5}), [("test_loss", 0.5)]),
        (_with({"step_seconds": 0.4, "lr": 0.001, "bleu": 31, "step": 9}), [("bleu", 31.0)]),
        (_with({"samples_per_second": 10.0, "note": "text"}), []),
    ],
    ids=["promotion-metric", "promotion-metric-absent", "task", "preference", "preference-2", "first", "none"],
)
def test_the_headline_figure_follows_one_rule(run: RunRecord, expected: list[tuple[str, float]]) -> None:
    assert headline_figures(run) == expected


HOSTILE_FINAL: dict[str, Any] = {
    "accuracy": float("nan"),
    "loss": float("inf"),
    "test_loss": -float("inf"),
    "big": 10**40,
    "huge_float": 1e300,
    "flag": True,
    "note": "<script>alert(1)</script>",
    "nested": {"deep": 1.0},
    "<img src=x>": 0.5,
    "x" * 65: 0.5,
    "aok": 0.25,
    **{f"f{i:05d}": float(i) for i in range(FIELDS_READ * 3)},
}


def test_hostile_figures_are_left_out_and_nothing_breaks() -> None:
    epochs = [{"epoch": 1, **HOSTILE_FINAL}, {"epoch": float("nan"), "loss": 1.0}, "not a dict", {"loss": 2.0}]
    run = replace(own_code(), metrics={"final": HOSTILE_FINAL, "epochs": epochs, "samples_per_second": float("nan")})
    final = final_figures_text(run)
    assert "nan" not in final and "inf" not in final and "big" not in final and "huge_float" not in final
    assert "<" not in final and "flag" not in final and "nested" not in final and "aok 0.25" in final
    assert final.count(",") < FIGURES_SHOWN
    assert figures_text(run) == "aok 0.25"  # no preferred name is a finite number: the first figure by name
    headers, rows = runs.epoch_table(run.metrics or {})
    assert len(rows) == 1 and len(headers) <= FIGURES_SHOWN and "ACCURACY" not in headers and "AOK" in headers
    text = runs.describe(run) + runs.describe_metrics(run)
    assert "nan" not in text.lower() and "inf " not in text


def test_epochs_come_from_lines_carrying_an_epoch_bounded_per_epoch() -> None:
    wide = {"epoch": 1, **{f"m{i:03d}": float(i) for i in range(EPOCH_FIELDS * 3)}, "bad": float("nan")}
    text = "\n".join(json.dumps(line) for line in [*map(dict, [wide]), {"epoch": 1, "m000": 9.0}, {"loss": 1.0}])
    doc = metrics_document(text, form="script")
    assert len(doc["epochs"]) == 1
    entry = doc["epochs"][0]
    assert len(entry) == EPOCH_FIELDS and entry["m000"] == 9.0 and "bad" not in entry


@pytest.mark.parametrize(
    ("trainer", "expected"),
    [
        (None, "built-in"),
        ({"script": "gs://landfall-code/scripts/ab/train.py"}, "script train.py"),
        (
            {"package_uris": ["gs://landfall-code/packages/ab/ddp_example-0.1.tar.gz"], "python_module": "ddp.train"},
            "package ddp.train (ddp_example-0.1.tar.gz)",
        ),
        ({"image_uri": "us-docker.pkg.dev/p/landfall/trainer:1.2"}, "image trainer:1.2"),
        ({"script": "gs://b/x/evil\x1b[2Jname.py"}, "script evil?[2Jname.py"),
    ],
)
def test_the_code_is_named_by_its_file_module_or_image(trainer: dict[str, Any] | None, expected: str) -> None:
    run = own_code()
    request = {k: v for k, v in run.request.items() if k != "trainer"} | ({"trainer": trainer} if trainer else {})
    assert code_text(replace(run, request=request)) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, "$0.00"),
        (0.0031, "$0.0031"),
        (0.03, "$0.03"),
        (0.0512, "$0.0512"),
        (0.5, "$0.50"),
        (0.004431, "$0.00443"),
        (1.0, "$1.00"),
        (1234.5, "$1,234.50"),
        (-0.0031, "-$0.0031"),
        (1e-9, "under $0.000001"),
        (float("nan"), "$?"),
        (float("inf"), "$?"),
    ],
)
def test_money_under_a_dollar_keeps_its_significant_digits(value: float, expected: str) -> None:
    assert usd_text(value) == expected


def test_every_place_money_is_printed_says_it_the_same_way() -> None:
    """`landfall run`, the runs page's row and `landfall teams` go through usd_text (a team's budget wait:
    tests/unit/test_teams.py)."""
    from landfall.ui.views import run_row
    from landfall.words import cost_text, price_text, spend_text
    from schemas.run_record import Cost

    run = replace(own_code(), cost=Cost(estimated_usd=0.0312, actual_usd=0.0031))
    assert "cost      estimated $0.0312, actual $0.0031" in runs.describe(run)
    assert (run_row(run)["est_cost"], run_row(run)["cost"]) == ("$0.0312", "$0.0031")
    assert cost_text(0.0031) == price_text(0.0031) == spend_text(0.0031) == "$0.0031"


def test_champion_lines_keep_the_champion_s_figures_apart_from_the_run_s_whatever_their_names() -> None:
    from functions.records.model_registration import scores

    text = "\n".join(
        json.dumps(line)
        for line in (
            {"epoch": 1, "step": 10, "loss": 0.6, "accuracy": 0.71, "test_loss": 0.55},
            {"epoch": 2, "step": 20, "loss": 0.4, "accuracy": 0.83, "test_loss": 0.41},
            # the script's own test() run on the champion, logging the same names
            {"phase": "champion", "accuracy": 0.78, "test_loss": 0.47, "version": "models/7@3"},
            {"phase": "champoin", "accuracy": 0.01},  # misspelt: skipped, never the run's figure
        )
    )
    doc = metrics_document(text, form="script")
    assert doc["final"]["accuracy"] == 0.83 and doc["final"]["test_loss"] == 0.41
    assert [e["accuracy"] for e in doc["epochs"]] == [0.71, 0.83]
    assert doc["champion"] == {"version": "models/7@3", "final": {"accuracy": 0.78, "test_loss": 0.47}}
    assert doc["skipped_lines"] == 1 and doc["metric_lines"] == 4
    assert scores(doc, "accuracy") == (0.83, 0.78, "models/7@3")


def test_without_champion_lines_there_is_no_champion_section() -> None:
    doc = metrics_document(json.dumps({"step": 1, "loss": 0.5}), form="script")
    assert "champion" not in doc


def test_the_run_text_of_a_submitted_script_says_what_it_knows_of_its_data_and_task() -> None:
    from schemas.data_objects import DataRead

    run = own_code()
    submitted = replace(run, request={**run.request, "dataset": {"uri": "gs://b/d/", "object_count": 0}})
    text = runs.describe(submitted)
    assert "dataset   gs://b/d/ (not counted yet: the job lists the folder when it starts)" in text
    assert "task      the team's code decides (the request names no task or model preset)" in text
    read = replace(submitted, data_read=DataRead(3, 1200, "d" * 64, "listing"))
    assert "dataset   gs://b/d/ (3 objects, 1200 bytes read)" in runs.describe(read)
    named = replace(run, request={**run.request, "task": "tabular-regression"})
    assert "task      tabular-regression / (no preset)" in runs.describe(named)
