"""A request's `hyperparameters.extra` is checked against the trainer's own flag table
(schemas/trainer_flags.py) by the dispatcher and by `landfall plan`, before any machine starts; the check agrees
with the trainer's parser on every case, through the very command line job_spec writes."""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from functions.dispatch.job_spec import trainer_args
from functions.dispatch.request_rules import request_problems
from functions.settings import settings_from_env
from landfall.commands.planning import register
from schemas import parse_training_request
from schemas.plan import parse_plan
from schemas.trainer_flags import HPARAM_FLAGS, HPARAMS, extra_problems
from trainer.config import Hparams, build_parser, parse_args
from trainer.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "schemas" / "examples" / "training_request.json"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SETTINGS = settings_from_env({"GOOGLE_CLOUD_PROJECT": "landfall-local"})
PLAN = parse_plan(json.loads((EXAMPLE.parent / "plan_cpu.json").read_text()))


def request_with(extra: dict[str, str]):
    request = parse_training_request(EXAMPLE.read_bytes())
    return replace(request, hyperparameters=replace(request.hyperparameters, extra=extra))


def test_an_unknown_extra_is_rejected_by_the_dispatcher_naming_it_and_the_known_keys() -> None:
    problems = request_problems(request_with({"warmup_step": "10"}), SETTINGS, NOW)
    assert len(problems) == 1
    assert problems[0].startswith(
        "hyperparameters.extra: 'warmup_step' is not a trainer flag (did you mean 'warmup_steps'?)"
    )
    assert f"known keys: {', '.join(HPARAMS)}" in problems[0]


def test_a_known_extra_with_a_value_the_trainer_cannot_read_is_rejected() -> None:
    problems = request_problems(request_with({"warmup_steps": "ten", "lr_schedule": "linear"}), SETTINGS, NOW)
    assert problems == [
        "hyperparameters.extra.lr_schedule: expected one of cosine, constant, got 'linear'",
        "hyperparameters.extra.warmup_steps: expected an integer, got 'ten'",
    ]
    assert request_problems(request_with({"warmup_steps": "10", "data_format": "csv"}), SETTINGS, NOW) == []


CASES = [
    {},
    {"warmup_steps": "10"},
    {"weight_decay": "0.01", "lr_schedule": "constant"},
    {"data_format": "parquet"},
    {"warmup_step": "10"},
    {"epochs": "3"},
    {"dropout": "0.1"},
    {"warmup_steps": "ten"},
    {"warmup_steps": "1.5"},
    {"grad_clip": "inf"},
    {"weight_decay": "nan"},
    {"lr_schedule": "linear"},
    {"data_format": "xml"},
    {"warmup_steps=1": "2"},
    {"": "1"},
    {"log_every": " 7 "},
    {"shuffle_window": "1_000"},
]


@pytest.mark.parametrize("extra", CASES, ids=[json.dumps(c) for c in CASES])
def test_the_check_accepts_exactly_what_the_trainer_parses_from_the_job_args(extra: dict[str, str]) -> None:
    """The dispatcher's verdict on extras and the trainer's verdict on the args job_spec writes always agree."""
    request = request_with(extra)
    args = trainer_args(request, PLAN)
    try:
        parse_args(args)
        trainer_takes_it = True
    except ConfigError:
        trainer_takes_it = False
    assert (extra_problems(extra) == []) == trainer_takes_it, (extra, extra_problems(extra))


def test_the_trainer_builds_its_hparams_and_parser_from_the_same_table() -> None:
    fields = dataclasses.fields(Hparams)
    assert [(f.name, f.type, f.default) for f in fields] == [(f.name, f.kind, f.default) for f in HPARAM_FLAGS]
    hparam = next(a for a in build_parser()._actions if a.dest == "hparam")
    assert all(f"{flag.name} ({flag.kind.__name__}" in (hparam.help or "") for flag in HPARAM_FLAGS)
    defaults = [f"{flag.name}={flag.default}" for flag in HPARAM_FLAGS]
    assert extra_problems(dict(d.split("=") for d in defaults)) == []
    assert parse_args([*trainer_args(request_with({}), PLAN), "--hparam", *defaults]).hparams == Hparams()


def plan_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="landfall")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


def test_landfall_plan_rejects_an_unknown_extra_before_planning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(EXAMPLE.read_text())
    data["hyperparameters"]["extra"] = {"dropout": "0.1"}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(data))
    code, out = plan_cli(["plan", str(path), "--now", NOW.isoformat()], capsys)
    assert code == 1
    assert out.startswith(
        "REJECTED: hyperparameters.extra: 'dropout' is not a trainer flag; known keys: weight_decay, warmup_steps"
    )
    code, out = plan_cli(["plan", str(path), "--json"], capsys)
    assert code == 1 and "'dropout' is not a trainer flag" in json.loads(out)["rejection"]
