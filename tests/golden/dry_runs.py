"""The golden dry runs of `landfall deploy` and `landfall teardown` for a sample project (tests/golden/*.sh).

Regenerate after a deliberate change to the topology, the routes or the deployer with:
    .venv/bin/python -m tests.golden.dry_runs
and read the diff: it is the change a real project would see.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from deploy.gcp.plan import Target, deploy_plan, prepare
from deploy.gcp.steps import dry_run_text
from deploy.gcp.teardown import teardown_plan

GOLDEN_DIR = Path(__file__).resolve().parent
SAMPLE = Target(
    project="landfall-sample",
    region="us-central1",
    project_number="123456789012",
    job_regions=("europe-west4",),
    image_tag="golden",
    ui_users=("group:ml-team@example.com", "user:ana@example.com"),
)
"""A sample project with jobs in two regions and a read-only dashboard for a group and a user; the image tag is fixed
so that trainer and dashboard changes do not move it."""


def deploy_text() -> str:
    return dry_run_text(deploy_plan(SAMPLE, prepare(SAMPLE)))


def teardown_text() -> str:
    return dry_run_text(teardown_plan(SAMPLE))


GOLDEN: dict[str, Callable[[], str]] = {"deploy_dry_run.sh": deploy_text, "teardown_dry_run.sh": teardown_text}


def main() -> None:
    for name, render in GOLDEN.items():
        (GOLDEN_DIR / name).write_text(render())
        print(f"wrote {GOLDEN_DIR / name}")


if __name__ == "__main__":
    main()
