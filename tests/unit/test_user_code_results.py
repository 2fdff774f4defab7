"""A team's code's results, read without running it: metrics lines to metrics.json, exits to classified failures,
the launcher's variables, and `landfall submit --script` building the request."""

from __future__ import annotations

import argparse
import json
import signal
from typing import Any

import pytest

from landfall.commands import submit
from landfall.errors import CommandError
from schemas.training_request import parse_training_request
from schemas.user_metrics import metrics_document
from schemas.vocabulary import REASON_FOR_TRAINER_KIND
from trainer.errors import ConfigError
from trainer.user_code import user_code_from_env
from trainer.user_results import classify_exit


def test_metrics_lines_keep_each_field_s_last_value_and_the_loss_curve() -> None:
    text = "\n".join(
        [
            json.dumps({"step": 1, "loss": 0.9, "lr": 0.1}),
            "not json",
            json.dumps({"step": 2, "loss": 0.5, "accuracy": 0.7}),
            json.dumps([1, 2]),
            json.dumps({"step": 3, "accuracy": 0.8}),
        ]
    )
    doc = metrics_document(text, form="script", world_size=4)
    assert doc["final"] == {"loss": 0.5, "lr": 0.1, "accuracy": 0.8} and doc["steps"] == 3
    assert doc["loss_curve"] == [{"step": 1, "loss": 0.9}, {"step": 2, "loss": 0.5}]
    assert (doc["metric_lines"], doc["skipped_lines"], doc["world_size"]) == (5, 2, 4)
    long = "\n".join(json.dumps({"step": i, "loss": 1 / (i + 1)}) for i in range(5000))
    curve = metrics_document(long, form="script")["loss_curve"]
    assert len(curve) == 1000 and curve[0]["step"] == 0 and curve[-1]["step"] == 4999


@pytest.mark.parametrize(
    ("codes", "stderr", "reason", "needle"),
    [
        ([-signal.SIGKILL, 0], [], "out-of-memory", "OOM killer"),
        ([1], ["Traceback", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"], "out-of-memory",
         "CUDA out of memory"),
        ([1], ["Traceback", "ModuleNotFoundError: No module named 'pandas'"], "bad-config", "No module named 'pandas'"),
        ([1, -signal.SIGTERM], ["Traceback", "ValueError: bad shape (3, 4)"], "user-code", "bad shape"),
        ([3], [], "user-code", "exited with status 3"),
    ],
)  # fmt: skip
def test_an_exit_is_classified_with_the_line_a_user_needs(
    codes: list[int], stderr: list[str], reason: str, needle: str
) -> None:
    failure = classify_exit(codes, stderr, rank=0)
    assert REASON_FOR_TRAINER_KIND.get(failure.kind, "user-code") == reason
    assert needle in failure.message and failure.exit_code > 0


def test_the_launcher_reads_what_to_run_and_refuses_a_half_given_form() -> None:
    assert user_code_from_env({}).builtin
    code = user_code_from_env(
        {"LANDFALL_TRAINER_FORM": "package", "LANDFALL_TRAINER_PACKAGES": '["gs://c/p.whl"]',
         "LANDFALL_TRAINER_MODULE": "p.train", "LANDFALL_LAUNCH": "per-node"}
    )  # fmt: skip
    assert (code.packages, code.module, code.launch) == (("gs://c/p.whl",), "p.train", "per-node")
    with pytest.raises(ConfigError, match="LANDFALL_TRAINER_SCRIPT"):
        user_code_from_env({"LANDFALL_TRAINER_FORM": "script"})
    with pytest.raises(ConfigError, match="JSON list"):
        user_code_from_env({"LANDFALL_TRAINER_FORM": "script", "LANDFALL_TRAINER_SCRIPT": "gs://c/t.py",
                            "LANDFALL_TRAINER_REQUIREMENTS": "numpy"})  # fmt: skip


def args(**given: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    submit.register(sub)
    argv = ["submit"]
    for key, value in given.items():
        for item in value if isinstance(value, list) else [value]:
            argv.append(f"--{key.replace('_', '-')}={item}")
    return parser.parse_args(argv)


def test_submit_script_uploads_the_code_and_builds_a_request_the_dispatcher_reads(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, reqs = tmp_path / "train.py", tmp_path / "requirements.txt"
    script.write_text("print('hi')\n")
    reqs.write_text("# pinned\nnumpy==2.1.0\n\nscipy  # for stats\n")
    uploads: list[tuple[str, str]] = []

    def upload(path: str, kind: str) -> str:
        uploads.append((path, kind))
        return "gs://c/s/train.py"

    monkeypatch.setattr(submit, "upload_code", upload)
    request = submit.code_request(
        args(script=str(script), data="gs://landfall-landing/d/", requirements=str(reqs), arg=["--lr", "0.1"],
             params=1000, env="WANDB_MODE=offline")
    )  # fmt: skip
    parsed = parse_training_request(request)
    assert uploads == [(str(script), "scripts")]
    assert parsed.trainer.script == "gs://c/s/train.py" and parsed.trainer.requirements == ("numpy==2.1.0", "scipy")
    assert parsed.trainer.args == ("--lr", "0.1") and parsed.trainer.env == {"WANDB_MODE": "offline"}
    assert parsed.workload.parameters == 1000 and parsed.dataset.uri == "gs://landfall-landing/d/"
    assert parsed.constraints.prefer == ""
    fast = submit.code_request(args(script=str(script), data="gs://landfall-landing/d/", params=1000, prefer="fastest"))
    assert parse_training_request(fast).constraints.prefer == "fastest"
    declared = submit.code_request(
        args(script=str(script), data="gs://landfall-landing/d/", params=70_000_000_000, trainable_params=140_000_000,
             flops_per_sample=1.2e15, activation_gib=2.5)
    )  # fmt: skip
    w = parse_training_request(declared).workload
    assert (w.trainable_parameters, w.flops_per_sample, w.activation_gib_per_sample) == (140_000_000, 1.2e15, 2.5)
    with pytest.raises(CommandError, match="--module"):
        submit.code_request(args(package="dist/p.whl", data="gs://b/d/"))
    with pytest.raises(CommandError, match="exactly one of"):
        submit.cmd_submit(args(script="a.py", image="x/y:1", data="gs://b/d/"))
