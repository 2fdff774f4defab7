"""`landfall run` (the trainer's reason, where TensorBoard files are, --metrics) and `landfall logs` (replica log
files on the local stack, the Cloud Logging filter in Google Cloud), with the run record read from a fake."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest

from deploy.local import provision
from landfall import cli, reach, stack_env, words
from landfall.commands import logs, runs
from landfall.queries import runs as stored_runs
from schemas.run_record import RunError, parse_run_record

GOLDEN: dict[str, Any] = json.loads((Path(__file__).parents[2] / "schemas/examples/run_record.json").read_text())
RUN_ID = GOLDEN["run_id"]
JOB_ID = GOLDEN["vertex"]["job_id"]
TABULAR = {
    "final": {"loss": 0.081, "accuracy": 0.975, "perplexity": None},
    "samples_per_second": 5120.5,
    "evaluation": {"split": "held-out", "samples": 200, "train_samples": 800, "val_fraction": 0.2},
    "wall_time_seconds": 41.2,
    "mfu": None,
    "tokens_per_second": None,
    "epochs": [
        {"epoch": 1, "loss": 0.4123, "accuracy": 0.91, "perplexity": None},
        {"epoch": 2, "loss": 0.081, "accuracy": 0.975, "perplexity": None},
    ],
}
VERTEX_SAYS = "The replica workerpool0-0 exited with a non-zero status of 3. Termination reason: Error."


def document(**changes: Any) -> dict[str, Any]:
    return copy.deepcopy(GOLDEN) | changes


@pytest.fixture()
def stored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """Run documents by id, served in place of Firestore, on a local stack that answers (state dir tmp_path)."""
    docs: dict[str, dict[str, Any]] = {}
    monkeypatch.setattr(stored_runs, "read_run_document", docs.get)
    monkeypatch.setattr(reach, "port_answers", lambda _host, _port: True)
    monkeypatch.setattr(provision, "default_state_dir", lambda: tmp_path)
    monkeypatch.setattr(stack_env, "default_state_dir", lambda: tmp_path)
    for key, value in {
        "GOOGLE_CLOUD_PROJECT": "landfall-local",
        "FIRESTORE_EMULATOR_HOST": "127.0.0.1:8086",
        "LANDFALL_VERTEX_ENDPOINT": "127.0.0.1:8090",
    }.items():
        monkeypatch.setenv(key, value)
    return docs


def landfall(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_landfall_run_shows_the_trainers_reason_then_vertexs_and_where_the_logs_are() -> None:
    reason = "gs://b/p/part-1.csv line 3: no label column 'label'"
    run = parse_run_record(
        document(
            state="FAILED",
            metrics=None,
            error=RunError("job-failed", reason, kind="DataError", step=7, job_message=VERTEX_SAYS).to_dict(),
        )
    )
    text = runs.describe(run)
    assert f"error     job-failed: {reason}\n          (the trainer's DataError, at step 7)\n" in text
    assert f"          Vertex: {VERTEX_SAYS}\n          replica logs: `landfall logs {RUN_ID}`" in text


def test_landfall_run_says_where_the_tensorboard_files_are(
    stored: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    stored[RUN_ID] = document()
    code, out, _ = landfall(["run", RUN_ID], capsys)
    assert code == 0
    assert f"tensorboard {GOLDEN['artifacts']['tensorboard_dir']} (TensorBoard event files; README.md" in out


def test_run_metrics_is_a_table_per_epoch(stored: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    stored[RUN_ID] = document(metrics=TABULAR)
    code, out, err = landfall(["run", RUN_ID, "--metrics"], capsys)
    assert code == 0 and err == ""
    assert out.splitlines()[:4] == [
        "EPOCH  LOSS    ACCURACY",
        "-----  ------  --------",
        "1      0.4123  0.91",
        "2      0.081   0.975",
    ]
    assert "measured on the held-out split: 200 samples (800 in the training split)" in out
    assert "samples/s 5120, wall s 41.2" in out and GOLDEN["artifacts"]["tensorboard_dir"] in out
    code, out, _ = landfall(["run", RUN_ID, "--metrics", "--json"], capsys)
    assert json.loads(out) == TABULAR["epochs"]


def test_a_language_models_table_shows_perplexity_and_new_figures_get_a_column() -> None:
    epochs = [{"epoch": 1, "loss": 2.5, "accuracy": None, "perplexity": 12.18, "eval_samples": 200}]
    assert runs.epoch_table({"epochs": epochs}) == (
        ["EPOCH", "LOSS", "PERPLEXITY", "EVAL SAMPLES"],
        [["1", "2.5", "12.18", "200"]],
    )


def test_run_metrics_before_the_run_succeeded_says_when_they_come(
    stored: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    stored[RUN_ID] = document(state="RUNNING", metrics=None)
    code, out, err = landfall(["run", RUN_ID, "--metrics"], capsys)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith(f"landfall run: run {RUN_ID} has no metrics (it is RUNNING): the trainer's metrics.json")


def test_an_unknown_run_is_one_line(stored: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["run", "run-nope"], ["run", "run-nope", "--json"], ["logs", "run-nope"]):
        code, _, err = landfall(argv, capsys)
        assert (code, err) == (1, f"landfall {argv[0]}: no run 'run-nope'; `landfall runs` lists them\n")


def test_a_run_that_does_not_read_says_why_and_how_often_reconciling_it_failed(
    stored: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    mark = {"count": 4, "last_error": "its document cannot be read", "first_seen": "T1", "last_seen": "T4"}
    stored[RUN_ID] = document(cost={"estimated_usd": "a lot"}, reconcile_errors=mark)
    code, _, err = landfall(["run", RUN_ID], capsys)
    assert code == 1 and "run.cost.estimated_usd" in err
    assert "(reconcile failed on 4 passes in a row (T1 to T4); last: its document cannot be read)" in err


def write_logs(state_dir: Path, replicas: dict[str, str]) -> None:
    folder = state_dir / logs.VERTEX_STATE / "jobs" / JOB_ID
    folder.mkdir(parents=True)
    for replica, text in replicas.items():
        (folder / f"{replica}.log").write_text(text)


STARTING = '{"severity": "INFO", "message": "trainer starting", "time": "2026-11-22T12:00:01.250000Z", "rank": 0}'
FAILED_LINE = (
    '{"severity": "ERROR", "message": "no label column", "time": "2026-11-22T12:00:03.000000Z", "rank": 0, '
    '"error": "DataError", "exit_code": 3}'
)


def test_logs_print_time_replica_and_message_as_text_and_json_prints_the_records(
    stored: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stored[RUN_ID] = document()
    write_logs(tmp_path, {"workerpool0-0": f"{STARTING}\nTraceback (most recent call last):\n{FAILED_LINE}"})
    code, out, _ = landfall(["logs", RUN_ID], capsys)
    assert code == 0 and out.splitlines() == [
        "2026-11-22T12:00:01.250  workerpool0-0  trainer starting",
        "                         workerpool0-0  Traceback (most recent call last):",
        "2026-11-22T12:00:03.000  workerpool0-0  ERROR no label column  error=DataError  exit_code=3",
    ]
    code, out, _ = landfall(["logs", RUN_ID, "--json"], capsys)
    assert code == 0 and out == f"{STARTING}\nTraceback (most recent call last):\n{FAILED_LINE}\n"


def test_logs_of_several_replicas_name_each_replica_in_replica_order(
    stored: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stored[RUN_ID] = document()
    write_logs(tmp_path, {"workerpool1-0": "b\n", "workerpool0-0": f"{STARTING}\n"})
    assert landfall(["logs", RUN_ID], capsys)[1].splitlines() == [
        "2026-11-22T12:00:01.250  workerpool0-0  trainer starting",
        "                         workerpool1-0  b",
    ]
    assert landfall(["logs", RUN_ID, "--json"], capsys)[1] == f"[workerpool0-0] {STARTING}\n[workerpool1-0] b\n"


def test_logs_say_when_there_are_none_yet_or_no_job_ever_ran(
    stored: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    stored[RUN_ID] = document(state="SUBMITTED")
    code, _, err = landfall(["logs", RUN_ID], capsys)
    assert code == 1 and f"no replica logs for job {JOB_ID}" in err and "--follow` waits for them" in err
    stored[RUN_ID] = document(state="REJECTED", vertex=None)
    code, _, err = landfall(["logs", RUN_ID], capsys)
    assert code == 1 and "is REJECTED and started no Vertex job" in err


def test_logs_of_a_job_in_google_cloud_print_the_filter_and_the_gcloud_command(
    stored: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("LANDFALL_VERTEX_ENDPOINT")
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST")
    stored[RUN_ID] = document(
        vertex=GOLDEN["vertex"] | {"job_name": f"projects/prod-ml/locations/us-central1/customJobs/{JOB_ID}"}
    )
    code, out, _ = landfall(["logs", RUN_ID], capsys)
    query = f'resource.type="ml_job" AND resource.labels.job_id="{JOB_ID}"'
    assert code == 0
    assert f"filter:  {query}\n" in out
    assert f"read:    gcloud logging read '{query}' --project=prod-ml --order=asc" in out
    assert f"follow:  gcloud beta logging tail '{query}' --project=prod-ml" in out


def test_follow_prints_lines_as_they_come_and_stops_once_the_run_ended(tmp_path: Path) -> None:
    log = tmp_path / "workerpool0-0.log"
    log.write_text("one\ntw")
    growth = iter(["o\nthree\n", "four (no newline at the end)"])
    ended = iter([False, False, True])
    out = io.StringIO()

    def sleep(_seconds: float) -> None:
        with log.open("a") as fh:
            fh.write(next(growth))

    logs.follow(lambda: {"workerpool0-0": log}, lambda: next(ended), out, sleep=sleep, raw=True)
    assert out.getvalue() == "one\ntwo\nthree\nfour (no newline at the end)\n"


def test_logs_follow_waits_for_the_job_as_tail_f_waits_for_the_file(
    stored: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--follow on a run with no job yet waits for it (the old command refused at once), then prints as text."""
    submitting = document(state="SUBMITTING", vertex=None)
    ended = document(state="SUCCEEDED")
    reads = iter([submitting, submitting, ended, ended, ended])
    monkeypatch.setattr(stored_runs, "read_run_document", lambda _run_id: next(reads))
    monkeypatch.setattr(logs, "FOLLOW_POLL_S", 0.0)
    write_logs(tmp_path, {"workerpool0-0": f"{STARTING}\n"})
    code, out, err = landfall(["logs", RUN_ID, "--follow"], capsys)
    assert code == 0 and "is SUBMITTING; waiting for its Vertex job" in err
    assert out == "2026-11-22T12:00:01.250  workerpool0-0  trainer starting\n"


def test_run_metrics_columns_keep_one_order_whatever_the_stored_key_order() -> None:
    """Firestore hands a map's keys back in no promised order: the table's columns do not follow it."""
    one = [{"perplexity": None, "accuracy": 0.5, "zeta": 1, "loss": 0.9, "epoch": 1, "alpha": 2}]
    other = [{"alpha": 2, "epoch": 1, "zeta": 1, "loss": 0.9, "accuracy": 0.5}]
    assert runs.epoch_table({"epochs": one}) == runs.epoch_table({"epochs": other})
    assert runs.epoch_table({"epochs": one})[0] == ["EPOCH", "LOSS", "ACCURACY", "ALPHA", "ZETA"]


@pytest.mark.parametrize("command", ["run", "logs", "watch", "retry", "cancel"])
@pytest.mark.parametrize("run_id", ["runs/x", "../x", "..", "__x__"])
def test_a_run_id_that_cannot_name_a_run_is_one_line(
    command: str, run_id: str, stored: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([command, run_id])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"landfall {command}: argument RUN_ID: {run_id!r} is not a run id: ")


@pytest.mark.parametrize(("typed", "meant"), [("wacth", "watch"), ("rnus", "runs"), ("reconcle", "reconcile")])
def test_a_mistyped_command_gets_did_you_mean(typed: str, meant: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([typed])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"invalid choice: {typed!r}; did you mean {meant}" in err
    assert err.count("\n") == 1 and "choose from" not in err


REGRESSION = {
    **TABULAR,
    "final": {"loss": 0.42, "accuracy": None, "perplexity": None, "r2": 0.58, "rmse": 53.1},
    "warnings": [{"code": "small-held-out", "message": "the held-out figures are measured on 24 rows, fewer than 30"}],
}


def test_each_task_shows_its_own_figures_and_the_runs_warnings() -> None:
    """A regression run shows R² and RMSE (not an empty accuracy column), a classification run
    its accuracy; a warning the trainer recorded is flagged in `landfall runs` and spelled out by `landfall run`."""
    request = copy.deepcopy(GOLDEN["request"]) | {"task": "tabular-regression"}
    regression = parse_run_record(document(request=request, metrics=REGRESSION))
    assert words.figures_text(regression) == "R² 0.58, RMSE 53.1 !"
    text = runs.describe(regression)
    assert "metrics   loss 0.42, R² 0.58, RMSE 53.1, " in text
    assert "warning   small-held-out: the held-out figures are measured on 24 rows, fewer than 30" in text
    assert "packages" not in text, "no requirements, no packages line"
    own = parse_run_record(document(metrics={**TABULAR, "packages": {"torch": "2.5.1", "pandas": "2.2.3", "x": 1}}))
    assert "\npackages  torch 2.5.1, pandas 2.2.3\n" in runs.describe(own)
    classification = parse_run_record(document(metrics=TABULAR))
    assert words.figures_text(classification) == "accuracy 0.975"
    assert "metrics   loss 0.081, accuracy 0.975, " in runs.describe(classification)
    assert "warning" not in runs.describe(classification)
