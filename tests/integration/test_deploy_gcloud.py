"""Every gcloud command `landfall deploy --dry-run` and `landfall teardown --dry-run` print, run through the real
gcloud CLI with an empty configuration and no credentials.

gcloud parses the command line (command groups, flags, enum values, files named by flags) before it asks for
credentials, so a command that gets as far as "You do not currently have an active account selected" is one gcloud
accepts; an unknown command, flag or value fails earlier with a different message. The probes, updates and fact
lookups the deployer runs (not printed) go through the same check. A deliberately wrong flag and a wrong value show
that the check catches what it must.

Every command goes through one gcloud interpreter (`gcloud_batch.py`: gcloud's own CLI object, built once, given
each command line in turn), because starting gcloud costs about a second of CPU per command and the dry runs print
well over a hundred. The mistakes are checked both ways, the batch and the `gcloud` program itself, and a sample of
the commands too, so the batch is held to what the program says.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
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
TARGET = Target(
    "landfall-sample",
    "us-central1",
    "123456789012",
    ("europe-west4",),
    "golden",
    ui_users=("group:ml-team@example.com", "user:ana@example.com"),
    ui_actions=("cancel", "retry"),
)
"""The sample project with its dashboard and every action it may offer: each command shape `landfall deploy` can
print goes through gcloud."""
PER_COMMAND_TIMEOUT_S = 60
BATCH_TIMEOUT_S = 600
BATCH_RUNNER = Path(__file__).with_name("gcloud_batch.py")


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


def credential_free_env(config: str) -> dict[str, str]:
    """This environment without the local stack's variables, gcloud settings or credentials, and config as gcloud's
    (empty) configuration directory."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in LOCAL_STACK_VARIABLES and not k.startswith("CLOUDSDK_") and k != "GOOGLE_APPLICATION_CREDENTIALS"
    }
    env.update(
        CLOUDSDK_CONFIG=config,
        CLOUDSDK_CORE_DISABLE_PROMPTS="1",
        CLOUDSDK_CORE_DISABLE_USAGE_REPORTING="1",
        CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK="1",
    )
    return env


def gcloud_without_credentials(argv: tuple[str, ...]) -> Verdict:
    """Run argv through the `gcloud` program from the repository root with a fresh, empty gcloud configuration and no
    way to find credentials."""
    with tempfile.TemporaryDirectory(prefix="gcloud-config-") as config:
        done = subprocess.run(
            list(argv),
            cwd=REPO_ROOT,
            env=credential_free_env(config),
            capture_output=True,
            text=True,
            timeout=PER_COMMAND_TIMEOUT_S,
            check=False,
        )
    return Verdict(argv, done.returncode, done.stderr)


def gcloud_batch_without_credentials(argvs: Sequence[tuple[str, ...]]) -> list[Verdict]:
    """Every argv through one gcloud interpreter (gcloud_batch.py), under the same conditions as
    gcloud_without_credentials: the Python and SDK the `gcloud` program runs, from the repository root, one fresh
    empty configuration."""
    with tempfile.TemporaryDirectory(prefix="gcloud-config-") as config:
        env = credential_free_env(config)
        info = subprocess.run(
            ["gcloud", "info", "--format=json(basic.python_location,installation.sdk_root)"],
            env=env,
            capture_output=True,
            text=True,
            timeout=PER_COMMAND_TIMEOUT_S,
            check=True,
        )
        where = json.loads(info.stdout)
        python, lib = where["basic"]["python_location"], Path(where["installation"]["sdk_root"]) / "lib"
        done = subprocess.run(
            [python, str(BATCH_RUNNER), str(lib)],
            input="".join(json.dumps(list(argv)) + "\n" for argv in argvs),
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=BATCH_TIMEOUT_S,
            check=False,
        )
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == len(argvs), (
        f"the gcloud batch runner stopped after {len(lines)} of {len(argvs)} commands (exit {done.returncode}): "
        f"{done.stderr[-2000:]}"
    )
    verdicts = [json.loads(line) for line in lines]
    return [Verdict(tuple(v["argv"]), v["returncode"], v["stderr"]) for v in verdicts]


def gcloud_one_in_batch(argv: tuple[str, ...]) -> Verdict:
    return gcloud_batch_without_credentials([argv])[0]


RUNNERS: dict[str, Callable[[tuple[str, ...]], Verdict]] = {
    "program": gcloud_without_credentials,
    "batch": gcloud_one_in_batch,
}


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
    import tomllib

    from deploy.gcp import plan as plan_module
    from deploy.teams import parse_teams

    # A teams file with a team's own topic and members: their grants' conditions through gcloud's parser too.
    teams = parse_teams(
        tomllib.loads(
            'operators = ["user:ops@example.com"]\n[[teams]]\nname = "vision"\n'
            'owns = [{bucket = "*", prefix = "datasets/vision/"}]\nmonthly_budget_usd = 10\n'
            'requests_topic = "landfall-requests-vision"\nmembers = ["user:ana@example.com", "group:v@example.com"]\n'
        )
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_module, "read_teams", lambda: teams)
        with_members = deploy_plan(TARGET, prepare(TARGET))
    deploy = deploy_plan(TARGET, prepare(TARGET))  # stages what --source, --env-vars-file name
    return [
        deploy,
        with_members,
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
    verdicts = gcloud_batch_without_credentials(every)
    assert [v.argv for v in verdicts] == every
    rejected = [v.explain() for v in verdicts if not v.credentials_only]
    assert not rejected, f"{len(rejected)} of {len(every)} commands not accepted by gcloud:\n" + "\n".join(rejected)
    assert len(set(printed)) >= 100, "the dry runs print far fewer commands than they should"
    print(f"{len(every)} gcloud commands checked in {time.monotonic() - started:.0f} s")


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize(
    ("mistake", "expected"),
    [
        (("--max-delivery-attempt=10",), "unrecognized arguments"),
        (("--ack-deadline=soon",), "invalid int value"),
    ],
)
def test_a_wrong_flag_or_value_is_caught_before_credentials(
    plans: list[Plan], mistake: tuple[str, ...], expected: str, runner: str
) -> None:
    subscription = next(
        argv
        for argv in printed_commands(plans[0])
        if argv[1:4] == ("pubsub", "subscriptions", "create") and "--dead-letter-topic" in str(argv)
    )
    verdict = RUNNERS[runner]((*subscription, *mistake))
    assert not verdict.credentials_only
    assert expected in verdict.stderr, verdict.explain()
    assert NO_CREDENTIALS not in verdict.stderr


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_wrong_choice_is_caught_before_credentials(plans: list[Plan], runner: str) -> None:
    database = next(argv for argv in printed_commands(plans[0]) if argv[1:4] == ("firestore", "databases", "create"))
    wrong = tuple(arg.replace("firestore-native", "firestore-nativ") for arg in database)
    verdict = RUNNERS[runner](wrong)
    assert not verdict.credentials_only and "Invalid choice" in verdict.stderr, verdict.explain()


def test_the_batch_and_the_gcloud_program_agree_on_a_sample_of_commands(plans: list[Plan]) -> None:
    """One command of each service the dry runs use, the first of each (gcloud GROUP), through both: the same exit
    status and the same first line (the batch's reuse of one CLI object changes nothing gcloud decides)."""
    sample = list({argv[1]: argv for argv in reversed([a for plan in plans for a in printed_commands(plan)])}.values())
    assert len(sample) >= 5, sample
    sample.append((*sample[0], "--no-such-flag"))
    batch = gcloud_batch_without_credentials(sample)
    for argv, batched in zip(sample, batch, strict=True):
        program = gcloud_without_credentials(argv)
        assert (batched.returncode, batched.stderr.splitlines()[:1]) == (
            program.returncode,
            program.stderr.splitlines()[:1],
        ), f"batch:\n{batched.explain()}\nprogram:\n{program.explain()}"


def test_staged_files_the_commands_name_exist(plans: list[Plan]) -> None:
    named = [
        arg.split("=", 1)[1]
        for argv in printed_commands(plans[0])
        for arg in argv
        if arg.startswith(("--source=", "--env-vars-file=", "--definition-file=", "--config="))
    ]
    named += [argv[3] for argv in printed_commands(plans[0]) if argv[1:3] == ("builds", "submit")]
    named += [argv[5] for argv in printed_commands(plans[0]) if argv[1:4] == ("run", "services", "set-iam-policy")]
    assert len(named) >= 10
    missing = [path for path in named if not (REPO_ROOT / path).exists()]
    assert not missing, f"commands name files that are not there: {missing}"
    assert all(not Path(path).is_absolute() for path in named)


def test_the_custom_job_printed_for_a_deployed_project_is_a_command_gcloud_accepts(
    plans: list[Plan], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`landfall plan --custom-job --project P` (after the deploy staged by `plans` recorded P's settings) prints a
    config.yaml headed by the gcloud line that submits it in P; that line, with the file, gets as far as credentials."""
    from landfall.cli import main

    request = REPO_ROOT / "schemas/examples/training_request.json"
    assert main(["plan", str(request), "--custom-job", "--project", TARGET.project]) == 0
    out = capsys.readouterr().out
    config = tmp_path / "config.yaml"
    config.write_text(out)
    line = next(line for line in out.splitlines() if line.startswith("#   gcloud ai custom-jobs create "))
    argv = tuple(arg.replace("config.yaml", str(config)) for arg in shlex.split(line.removeprefix("#   ")))
    assert f"--project={TARGET.project}" in argv and ":local" not in out
    verdict = gcloud_one_in_batch(argv)
    assert verdict.credentials_only, verdict.explain()
