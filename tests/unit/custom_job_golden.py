"""The golden CustomJobs in tests/unit/golden/custom_jobs/: one TrainingRequest per case and the REST body that
`landfall plan REQUEST --custom-job --format json` prints for it, in a fixed project, at a fixed time.

Regenerate after a deliberate change with:  .venv/bin/python -m tests.unit.custom_job_golden
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from landfall.commands.planning import register
from schemas.training_request import parse_training_request
from tests.fakes.ingest import FakeObjects

GOLDEN = Path(__file__).parent / "golden" / "custom_jobs"
NOW = "2026-11-22T12:00:00+00:00"
PROJECT = "acme-ml"
ENV = {
    "GOOGLE_CLOUD_PROJECT": PROJECT,
    "LANDFALL_LANDING_BUCKET": f"{PROJECT}-landfall-landing",
    "LANDFALL_TRAINER_IMAGE": f"us-central1-docker.pkg.dev/{PROJECT}/landfall/trainer:3f2a9c1e0b7d4e6f",
    "LANDFALL_CODE_BUCKET": f"{PROJECT}-landfall-code",
    "LANDFALL_TRAINING_SERVICE_ACCOUNT": f"landfall-training@{PROJECT}.iam.gserviceaccount.com",
    "LANDFALL_ARTIFACT_BUCKETS": (
        f"us-central1={PROJECT}-landfall-artifacts-us-central1,europe-west4={PROJECT}-landfall-artifacts-europe-west4"
    ),
}
"""Everything the dispatcher's settings read that shapes a job; every other LANDFALL_ variable is left unset."""
CASE_ENV = {
    "reservation": {
        "LANDFALL_RESERVATIONS": json.dumps(
            {"acme-h100s": {"machine_type": "a3-highgpu-8g", "zone": "us-central1-a", "count": 2}}
        )
    },
}
"""Settings only some cases add (a declared reservation would be preferred by every plan that can use it)."""
CASES = (
    "cpu_only",
    "one_gpu",
    "eight_gpus_one_node",
    "four_nodes_reduction_server_europe",
    "two_nodes_fsdp_a3_ultra",
    "spot",
    "flex_start",
    "pinned_a3_highgpu_2g",
    "own_script_two_nodes",
    "own_package",
    "own_image",
    "reservation",
    "b200_one_node",
    "four_nodes_a3_mega",
    "own_image_four_nodes",
    "retry_on_its_line",
    "own_image_retry_on_its_line",
    "tensor_pipeline_four_nodes",
    "tensor_parallel_one_node",
    "own_script_tensor_pipeline",
    "one_node_activation_checkpointing",
)


def request_path(case: str) -> Path:
    return GOLDEN / f"{case}.request.json"


def golden_path(case: str) -> Path:
    return GOLDEN / f"{case}.custom_job.json"


def env_for(case: str) -> dict[str, str]:
    """The dispatcher's environment for one case."""
    return {**ENV, **CASE_ENV.get(case, {})}


@contextlib.contextmanager
def dispatcher_environment(case: str = "") -> Iterator[None]:
    """os.environ as a deployed dispatcher in project acme-ml would have it (nothing of the local stack's)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("LANDFALL_") and k != "GOOGLE_CLOUD_PROJECT"}
    with mock.patch.dict(os.environ, {**kept, **env_for(case)}, clear=True):
        yield


def dataset_of(case: str) -> FakeObjects:
    """Cloud Storage holding one data object in the case's dataset (what the export lists for a team's code)."""
    objects = FakeObjects()
    request = parse_training_request(request_path(case).read_text())
    objects.put(f"{request.dataset.prefix}part-0.txt", b"one line\n")
    return objects


def export(case: str, fmt: str, objects: FakeObjects | None = None, path: Path | None = None) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `landfall plan <case request> --custom-job --format fmt --now NOW`, with
    Cloud Storage (where the export writes a team's code its dataset listing) the fake `objects` (default:
    dataset_of(case)); path: another request file, planned in the case's environment."""
    parser = argparse.ArgumentParser(prog="landfall")
    register(parser.add_subparsers(dest="command"))
    request = str(path or request_path(case))
    args = parser.parse_args(["plan", request, "--custom-job", "--format", fmt, "--now", NOW])
    out, err = io.StringIO(), io.StringIO()
    storage = objects if objects is not None else dataset_of(case)
    with (
        dispatcher_environment(case),
        mock.patch("landfall.commands.planning.dataset_objects", lambda: storage),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = args.func(args)
    return code, out.getvalue(), err.getvalue()


def main() -> None:
    for case in CASES:
        code, out, err = export(case, "json")
        if code != 0:
            raise SystemExit(f"{case}: exit {code}: {err}")
        golden_path(case).write_text(out)
        print(f"wrote {golden_path(case)}")


if __name__ == "__main__":
    main()
