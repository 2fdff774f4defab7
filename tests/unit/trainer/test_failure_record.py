"""The trainer's failure record (trainer/failure.py), written in this process: what `python -m trainer.task` leaves
in AIP_MODEL_DIR before it exits non-zero, and which record stays when several processes fail. The same through
real processes is in tests/integration/trainer/test_failure_record.py."""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from schemas.trainer_failure import FAILURE_FILE, TrainerFailure, parse_trainer_failure
from trainer import launcher, task
from trainer.errors import ConfigError, DataError
from trainer.failure import failure_of, note_step, record_failure

ARGS = [
    "--data-uri=/nowhere",
    "--task=tabular-classification",
    "--model=mlp-small",
    "--epochs=1",
    "--batch-size=8",
    "--learning-rate=0.1",
    "--seed=1",
]


def stored(model_dir: Path) -> TrainerFailure:
    return parse_trainer_failure((model_dir / FAILURE_FILE).read_text())


@pytest.fixture()
def model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "model"
    monkeypatch.setenv("AIP_MODEL_DIR", str(out))
    monkeypatch.setenv("RANK", "1")
    return out


def test_an_unknown_flag_is_a_config_error_whose_record_holds_argparses_line(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert task.main([*ARGS, "--warmup=3"]) == 2
    record = stored(model_dir)
    assert (record.kind, record.exit_code, record.rank, record.step) == ("ConfigError", 2, 1, None)
    assert record.message.endswith("error: unrecognized arguments: --warmup=3")
    assert "usage:" in capsys.readouterr().err  # argparse's usage text still reaches the replica log


def test_a_bad_setting_is_recorded_with_the_trainers_message(model_dir: Path) -> None:
    assert task.main([*ARGS, "--hparam", "val_fraction=1.5"]) == 2
    assert stored(model_dir).message == "--hparam val_fraction=1.5: expected 0 <= value < 1"


def test_a_crash_is_recorded_and_still_raised(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(_argv: list[str]) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(task, "parse_args", crash)
    with pytest.raises(RuntimeError, match="boom"):
        task.main(ARGS)
    assert stored(model_dir) == TrainerFailure(kind="RuntimeError", message="RuntimeError: boom", exit_code=1, rank=1)


def test_the_step_reached_and_the_rank_are_kept() -> None:
    exc = DataError("gs://b/p/part-1.csv", "expected a finite number", line=9)
    note_step(exc, 40)
    assert failure_of(exc, 3, {"RANK": "3"}) == TrainerFailure(
        kind="DataError", message="gs://b/p/part-1.csv line 9: expected a finite number", exit_code=3, step=40, rank=3
    )


def test_the_first_record_stays_but_a_trainer_error_replaces_a_crash(tmp_path: Path) -> None:
    environ = {"AIP_MODEL_DIR": str(tmp_path)}
    crash = TrainerFailure(kind="RuntimeError", message="RuntimeError: connection reset by peer", exit_code=1)
    data = failure_of(DataError("x.csv", "bad"), 3, {})
    config = failure_of(ConfigError("bad flag"), 2, {})
    assert record_failure(environ, crash) == str(tmp_path / FAILURE_FILE)
    assert record_failure(environ, data) is not None and stored(tmp_path) == data
    assert record_failure(environ, config) is None and stored(tmp_path) == data
    assert record_failure(environ, crash) is None and stored(tmp_path) == data
    assert record_failure({}, data) is None  # no AIP_MODEL_DIR: nowhere to write, nothing raised


def test_a_record_that_cannot_be_written_does_not_hide_the_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert record_failure({"AIP_MODEL_DIR": str(blocked / "model")}, failure_of(ConfigError("x"), 2, {})) is None
    assert "could not write the failure record" in capsys.readouterr().out


def test_a_process_killed_by_a_signal_is_recorded_by_the_launcher(tmp_path: Path) -> None:
    child = SimpleNamespace(pid=4242, returncode=-signal.SIGKILL)
    launcher._record_killed(child, {"AIP_MODEL_DIR": str(tmp_path)})  # type: ignore[arg-type]
    record = stored(tmp_path)
    # SIGKILL is what the kernel's OOM killer sends: out-of-memory (trainer contract), not a crash.
    assert (record.kind, record.exit_code) == ("OutOfMemory", 137)
    assert record.message.startswith(
        "a training process (pid 4242) was killed by SIGKILL: most often the kernel's OOM killer"
    )
