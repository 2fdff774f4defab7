"""Every gcloud command `landfall deploy --dry-run` and `landfall teardown --dry-run` print, run through the real
gcloud CLI with an empty configuration and no credentials.

gcloud parses the command line (command groups, flags, enum values, files named by flags) before it asks for
credentials, so a command that gets as far as "You do not currently have an active account selected" is one gcloud
accepts; an unknown command, flag or value fails earlier with a different message. The probes, updates and fact
lookups the deployer runs (not printed) go through the same check. A deliberately wrong flag and a wrong value show
that the check catches what it must.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.gcp.bundles import REPO_ROOT
from deploy.gcp.execute import LOCAL_STACK_VARIABLES
from deploy.gcp.plan import Plan, Target, deploy_plan, prepare
from deploy.gcp.steps import dry_run_text, resolve
from deploy.gcp.teardown import teardown_plan

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is not installed"),
]

NO_CREDENTIALS = "You do not currently have an active account selected"
ARGUMENT_ERRORS = (
    "unrecognized arguments",
    "Invalid value",
    "Invalid choice",
    "argument ",
    "is required",
    "must be specified",
    "Bad value",
    "is not a valid",
    "expected one argument",
)
TARGET = Target("landfall-sample", "us-central1", "123456789012", ("europe-west4",), "golden")
WORKERS = max(2, 2 * (os.cpu_count() or 1))
PER_COMMAND_TIMEOUT_S = 60


@dataclass(frozen=True)
class Verdict:
    argv: tuple[str, ...]
    returncode: int
    stderr: str

    @property
    def credentials_only(self) -> bool:
        """Failed, and only for lack of credentials (gcloud accepted the command line)."""
        return (
            self.returncode != 0
            and NO_CREDENTIALS in self.stderr
            and not any(marker in self.stderr for marker in ARGUMENT_ERRORS)
        )

    def explain(self) -> str:
        return f"{shlex.join(self.argv)}\n  exit {self.returncode}: {' '.join(self.stderr.split())[:600]}"


def gcloud_without_credentials(argv: tuple[str, ...]) -> Verdict:
    """Run argv from the repository root with a fresh, empty gcloud configuration and no way to find credentials."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in LOCAL_STACK_VARIABLES and not k.startswith("CLOUDSDK_") and k != "GOOGLE_APPLICATION_CREDENTIALS"
    }
    with tempfile.TemporaryDirectory(prefix="gcloud-config-") as config:
        env.update(
            CLOUDSDK_CONFIG=config,
            CLOUDSDK_CORE_DISABLE_PROMPTS="1",
            CLOUDSDK_CORE_DISABLE_USAGE_REPORTING="1",
            CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK="1",
        )
        done = subprocess.run(
            list(argv),
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=PER_COMMAND_TIMEOUT_S,
            check=False,
        )
    return Verdict(argv, done.returncode, done.stderr)


def printed_commands(plan: Plan) -> list[tuple[str, ...]]:
    return [tuple(shlex.split(line)) for line in dry_run_text(plan).splitlines() if line and not line.startswith("#")]


def unprinted_commands(plan: Plan) -> list[tuple[str, ...]]:
    """The probes, updates, guards and fact lookups the deployer runs besides the printed commands, one of each
    shape (command and flag names): they differ from each other only in resource names."""
    facts = plan.predicted()
    argvs = [tuple(resolve(argv, facts)) for step in plan.steps for argv in step.argvs()]
    argvs += [step.guard.argv for step in plan.steps if step.guard]
    argvs += [fact.lookup for fact in plan.facts]
    shapes: dict[tuple[str, ...], tuple[str, ...]] = {}
    for argv in argvs:
        shape = (*argv[1:4], *sorted(arg.split("=", 1)[0] for arg in argv if arg.startswith("--")))
        shapes.setdefault(shape, argv)
    return list(shapes.values())


@pytest.fixture(scope="module")
def plans() -> list[Plan]:
    deploy = deploy_plan(TARGET, prepare(TARGET))  # stages what --source, --env-vars-file name
    return [
        deploy,
        teardown_plan(TARGET),
        teardown_plan(
            Target(TARGET.project, TARGET.region, TARGET.project_number, TARGET.job_regions, delete_data=True)
        ),
    ]


def test_every_printed_and_every_probe_command_fails_only_for_credentials(plans: list[Plan]) -> None:
    printed = [argv for plan in plans for argv in printed_commands(plan)]
    every = list(dict.fromkeys([*printed, *(argv for plan in plans for argv in unprinted_commands(plan))]))
    assert all(argv[0] == "gcloud" for argv in every)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        verdicts = list(pool.map(gcloud_without_credentials, every))
    rejected = [v.explain() for v in verdicts if not v.credentials_only]
    assert not rejected, f"{len(rejected)} of {len(every)} commands not accepted by gcloud:\n" + "\n".join(rejected)
    assert len(set(printed)) >= 100, "the dry runs print far fewer commands than they should"
    print(f"{len(every)} gcloud commands checked in {time.monotonic() - started:.0f} s")


@pytest.mark.parametrize(
    ("mistake", "expected"),
    [
        (("--max-delivery-attempt=10",), "unrecognized arguments"),
        (("--ack-deadline=soon",), "invalid int value"),
    ],
)
def test_a_wrong_flag_or_value_is_caught_before_credentials(
    plans: list[Plan], mistake: tuple[str, ...], expected: str
) -> None:
    subscription = next(
        argv
        for argv in printed_commands(plans[0])
        if argv[1:4] == ("pubsub", "subscriptions", "create") and "--dead-letter-topic" in str(argv)
    )
    verdict = gcloud_without_credentials((*subscription, *mistake))
    assert not verdict.credentials_only
    assert expected in verdict.stderr, verdict.explain()
    assert NO_CREDENTIALS not in verdict.stderr


def test_a_wrong_choice_is_caught_before_credentials(plans: list[Plan]) -> None:
    database = next(argv for argv in printed_commands(plans[0]) if argv[1:4] == ("firestore", "databases", "create"))
    wrong = tuple(arg.replace("firestore-native", "firestore-nativ") for arg in database)
    verdict = gcloud_without_credentials(wrong)
    assert not verdict.credentials_only and "Invalid choice" in verdict.stderr, verdict.explain()


def test_staged_files_the_commands_name_exist(plans: list[Plan]) -> None:
    named = [
        arg.split("=", 1)[1]
        for argv in printed_commands(plans[0])
        for arg in argv
        if arg.startswith(("--source=", "--env-vars-file=", "--definition-file="))
    ]
    named += [argv[3] for argv in printed_commands(plans[0]) if argv[1:3] == ("builds", "submit")]
    assert len(named) >= 10
    missing = [path for path in named if not (REPO_ROOT / path).exists()]
    assert not missing, f"commands name files that are not there: {missing}"
    assert all(not Path(path).is_absolute() for path in named)
