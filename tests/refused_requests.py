"""Requests that must be REJECTED before any job, each with what its reason must say: URIs that name another place
than they seem to, requirement lines that are installer options or URLs, a command on an image the deployment does
not own, mistyped fields, and labels that are Landfall's. One table for the unit tests (the fake world) and the
stack test (published on the requests topic)."""

from __future__ import annotations

from typing import Any

PREBUILT = "us-docker.pkg.dev/vertex-ai/training"
SIZED = {"workload": {"parameters": 10}}
BUILT_IN = {"task": "tabular-classification", "model": {"preset": "mlp-small"}}


def _script(code_bucket: str, **trainer: Any) -> dict[str, Any]:
    return {"trainer": {"script": f"gs://{code_bucket}/scripts/train.py", **trainer}, **SIZED}


def cases(code_bucket: str, landing_bucket: str) -> dict[str, tuple[dict[str, Any], tuple[str, ...]]]:
    """case -> (the request's fields besides idempotency_key and dataset.uri, what the run's error must say)."""
    code, landing = code_bucket, landing_bucket
    return {
        "image-dotdot": (
            {"trainer": {"image_uri": f"{PREBUILT}/../../evil-project/miner:1"}, **SIZED},
            ("trainer.image_uri", "'.' or '..' path component"),
        ),
        "image-escaped-dotdot": (
            {"trainer": {"image_uri": f"{PREBUILT}/%2e%2e/%2e%2e/evil-project/miner:1"}, **SIZED},
            ("trainer.image_uri", "percent-escape"),
        ),
        "image-space": (
            {"trainer": {"image_uri": f"{PREBUILT}/pytorch-gpu.2-4.py310:latest --privileged"}, **SIZED},
            ("trainer.image_uri", "space"),
        ),
        "image-empty-component": (
            {"trainer": {"image_uri": f"{PREBUILT}//miner:1"}, **SIZED},
            ("trainer.image_uri", "empty path component"),
        ),
        "script-dotdot": (
            {"trainer": {"script": f"gs://{code}/../{landing}/datasets/evil.py"}, **SIZED},
            ("trainer.script", "'.' or '..' segment"),
        ),
        "script-escaped-dotdot": (
            {"trainer": {"script": f"gs://{code}/%2e%2e/{landing}/datasets/evil.py"}, **SIZED},
            ("trainer.script", "percent-escape"),
        ),
        "script-empty-segment": (
            {"trainer": {"script": f"gs://{code}//{landing}/evil.py"}, **SIZED},
            ("trainer.script", "empty segment"),
        ),
        "package-dotdot": (
            {"trainer": {"package_uris": [f"gs://{code}/../{landing}/p.whl"], "python_module": "p.train"}, **SIZED},
            ("trainer.package_uris", "'.' or '..' segment"),
        ),
        "dataset-dotdot": (
            {"dataset": {"uri": f"gs://{landing}/../{code}/"}, **BUILT_IN},
            ("dataset.uri", "'.' or '..' segment"),
        ),
        "requirement-target": (
            _script(code, requirements=["numpy", "--target=/some/host/folder"]),
            ("trainer.requirements[1]", "'--target=/some/host/folder' is an installer option", "package specifier"),
        ),
        "requirement-index-url": (
            _script(code, requirements=["--index-url https://evil.example/simple"]),
            ("trainer.requirements[0]", "installer option"),
        ),
        "requirement-editable": (
            _script(code, requirements=["-e git+https://github.com/evil/pkg"]),
            ("trainer.requirements[0]", "installer option"),
        ),
        "requirement-url": (
            _script(code, requirements=["https://evil.example/pkg-1.0-py3-none-any.whl"]),
            ("trainer.requirements[0]", "URL or a path"),
        ),
        "requirement-direct-url": (
            _script(code, requirements=["pkg @ https://evil.example/pkg.whl"]),
            ("trainer.requirements[0]", "names a URL"),
        ),
        "requirement-path": (
            _script(code, requirements=["./vendored/pkg"]),
            ("trainer.requirements[0]", "URL or a path"),
        ),
        "command-on-prebuilt": (
            {"trainer": {"image_uri": f"{PREBUILT}/pytorch-gpu.2-4.py310:latest", "command": ["python", "-c", "1"]},
             **SIZED},
            ("trainer.command", "deployment's own repository", "LANDFALL_COMMAND_IMAGE_PREFIXES"),
        ),
        "args-on-prebuilt": (
            {"trainer": {"image_uri": f"{PREBUILT}/pytorch-gpu.2-4.py310:latest", "args": ["python", "-c", "1"]},
             **SIZED},
            ("trainer.args", "deployment's own repository"),
        ),
        "typo-budget": (
            {**BUILT_IN, "constraints": {"budget_usdd": 5}},
            ("constraints.budget_usdd", "did you mean 'budget_usd'?"),
        ),
        "typo-spot": (
            {**BUILT_IN, "constraints": {"spott": "never"}},
            ("constraints.spott", "did you mean 'spot'?"),
        ),
        "typo-hyperparameters": (
            {**BUILT_IN, "hyperparamters": {"epochs": 3}},
            ("hyperparamters", "did you mean 'hyperparameters'?"),
        ),
        "typo-workload": (
            {"trainer": {"script": f"gs://{code}/scripts/train.py"}, "workload": {"trainable_params": 10}},
            ("workload.trainable_params", "did you mean 'trainable_parameters'?"),
        ),
        "label-phase": (
            {**BUILT_IN, "labels": {"landfall-phase": "canary"}},
            ("labels", "'landfall-phase' is Landfall's own label"),
        ),
        "label-route": (
            {**BUILT_IN, "labels": {"landfall-route": "another-teams-route"}},
            ("labels", "'landfall-route' is Landfall's own label", "another-teams-route"),
        ),
        "labels-65": (
            {**BUILT_IN, "labels": {f"team-{i}": "x" for i in range(65)}},
            ("labels", "has 65 labels", "at most 60"),
        ),
    }  # fmt: skip


def request(case: dict[str, Any], key: str, data_uri: str) -> dict[str, Any]:
    """The full request of a case: its key, the dataset (unless the case names its own) and its fields."""
    return {"idempotency_key": key, "dataset": {"uri": data_uri}, **case}
