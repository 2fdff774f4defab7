"""The deployer converges: against a fake gcloud that remembers what exists, a first run creates everything, a
second run creates nothing, a failure names its step and what to do, and teardown keeps a bucket holding data."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

import pytest

from deploy.gcp.bundles import REPO_ROOT
from deploy.gcp.execute import Executor, Result, StepError
from deploy.gcp.plan import Target, deploy_plan, prepare
from deploy.gcp.steps import Plan, dry_run_text
from deploy.gcp.teardown import teardown_plan
from tests.golden.dry_runs import SAMPLE

WRITER = "serviceAccount:p4242-123@gcp-sa-logging.iam.gserviceaccount.com"
"""A writer identity unlike the predicted one: the deployer must bind what the sink reports."""


class FakeProject:
    """Just enough of gcloud: describe/list answer from what create made; fact lookups answer; create records."""

    def __init__(self) -> None:
        self.existing: set[str] = set()
        self.calls: list[list[str]] = []
        self.fail_on: str | None = None
        self.objects_in: set[str] = set()
        self.open_jobs: dict[str, list[str]] = {}
        """region -> ids of Landfall's jobs that are queued or running there."""

    @staticmethod
    def key(argv: Sequence[str]) -> str:
        """The resource a create/describe/update/delete names: its command group and first positional."""
        words = [a for a in argv[1:] if not a.startswith("-")]
        verbs = {"create", "describe", "update", "delete", "deploy", "list", "submit", "enable", "service-agent"}
        at = next((i for i, w in enumerate(words) if w in verbs), len(words))
        group = " ".join(words[:at])
        rest = [w for w in words[at + 1 :] if w != "pubsub"][:1]  # `scheduler jobs create pubsub NAME`
        rest = [w.split("@")[0] for w in rest]  # a service account: created by id, described by email
        if words[:3] == ["artifacts", "docker", "images"]:
            return "image " + rest[0]
        if words[:2] == ["functions", "deploy"]:
            group = "functions"
        if words[:2] == ["run", "deploy"]:  # a Cloud Run service: deployed by `run deploy`, described as a service
            group = "run services"
        if words[:2] == ["artifacts", "repositories"]:  # one repository per region, by the same name
            rest = [*rest, *(a for a in argv if a.startswith("--location="))]
            return f"{group} {' '.join(rest)}"
        if group.endswith("notifications"):
            return group
        if words[:2] == ["firestore", "indexes"]:
            return "firestore indexes " + " ".join(sorted(a for a in argv if a.startswith("--field-config")))
        return f"{group} {rest[0] if rest else ''}".strip()

    def __call__(self, argv: Sequence[str]) -> Result:
        argv = list(argv)
        self.calls.append(argv)
        line = shlex.join(argv)
        if self.fail_on and self.fail_on in line:
            return Result(1, "", "ERROR: (gcloud) PERMISSION_DENIED: caller lacks storage.buckets.create")
        if argv[1:3] == ["projects", "describe"]:
            return Result(0, "123456789012\n", "")
        if "--format=value(writerIdentity)" in argv:
            return Result(0, WRITER + "\n", "")
        if argv[1:3] == ["functions", "describe"] and "--format=value(url)" in argv:
            return Result(0, f"https://real-url.example/{argv[3]}\n", "")
        if argv[1:3] == ["storage", "objects"]:
            bucket = argv[4].removeprefix("gs://").removesuffix("/**")
            return Result(0, "datasets/a/part-0.csv\n" if bucket in self.objects_in else "", "")
        if argv[1:3] == ["projects", "get-iam-policy"]:
            return Result(0, json.dumps({"bindings": []}), "")
        if argv[1:4] == ["ai", "custom-jobs", "list"]:
            region = next(a.split("=", 1)[1] for a in argv if a.startswith("--region="))
            return Result(0, "".join(f"{job}\n" for job in self.open_jobs.get(region, [])), "")
        if argv[1:4] == ["ai", "custom-jobs", "cancel"]:
            region = next(a.split("=", 1)[1] for a in argv if a.startswith("--region="))
            self.open_jobs[region].remove(argv[4])
            return Result(0, "", "")
        if argv[1:3] == ["builds", "submit"]:
            config = next(a.split("=", 1)[1] for a in argv if a.startswith("--config="))
            self.existing |= {f"image {uri}" for uri in json.loads((REPO_ROOT / config).read_text())["images"]}
            return Result(0, "", "")
        key = self.key(argv)
        verb = next(
            a
            for a in argv[1:]
            if a
            in (
                "create",
                "describe",
                "update",
                "delete",
                "deploy",
                "list",
                "submit",
                "enable",
                "service-agent",
                "add-iam-policy-binding",
                "add-invoker-policy-binding",
                "remove-iam-policy-binding",
                "set-iam-policy",
            )
        )
        if verb in ("describe", "list"):
            if key.startswith("firestore indexes") or key.endswith("notifications"):
                return Result(0, "[]", "")  # listing probes: the matcher decides (tested separately)
            return Result(0, "{}", "") if key in self.existing else Result(1, "", "NOT_FOUND")
        if verb in ("create", "deploy", "submit"):
            self.existing.add(key)
        if verb == "delete":
            self.existing.discard(key)
        return Result(0, "", "")


def run(plan: Plan, project: FakeProject) -> list[str]:
    return [o.action for o in Executor(plan, project, report=lambda _: None).run()]


@pytest.fixture(scope="module")
def plan() -> Plan:
    target = Target(SAMPLE.project, SAMPLE.region, "", SAMPLE.job_regions, "golden")  # number looked up
    return deploy_plan(target, prepare(target))


def test_a_first_run_creates_everything_and_a_second_creates_nothing(plan: Plan) -> None:
    project = FakeProject()
    first = run(plan, project)
    assert set(first) == {"created"}
    creates = [c for c in project.calls if "create" in c or "deploy" in c or "submit" in c]
    project.calls.clear()
    second = run(plan, project)
    assert "created" not in [a for a, s in zip(second, plan.steps, strict=True) if s.probe and not s.found]
    again = [
        shlex.join(c)
        for c in project.calls
        if c[1:4] != ["firestore", "indexes", "composite"]
        and c[1:5] != ["storage", "buckets", "notifications", "create"]
        and (" create " in shlex.join(c) or c[1:3] == ["builds", "submit"])
    ]
    assert not again, f"a second run created again: {again}"
    assert second.count("updated") >= 4 and second.count("unchanged") >= 10
    assert len(creates) >= 30  # APIs aside: databases, accounts, buckets, topics, functions, subscriptions...


def test_facts_come_from_the_project_not_the_prediction(plan: Plan) -> None:
    project = FakeProject()
    run(plan, project)
    lines = [shlex.join(c) for c in project.calls]
    assert any(f"--member={WRITER}" in line for line in lines), "the sink's own writer identity is bound"
    assert any("--push-endpoint=https://real-url.example/landfall-dispatch" in line for line in lines)
    assert any("service-123456789012@gcp-sa-pubsub" in line for line in lines), "the looked-up project number"
    assert sum(c[1:3] == ["projects", "describe"] for c in project.calls) == 1, "each fact is looked up once"


def test_a_failure_names_the_step_the_command_and_what_to_do(plan: Plan) -> None:
    project = FakeProject()
    project.fail_on = "storage buckets create gs://landfall-sample-landfall-landing"
    with pytest.raises(StepError) as failed:
        run(plan, project)
    message = str(failed.value)
    assert "failed: create the bucket gs://landfall-sample-landfall-landing in us-central1" in message
    assert "gcloud storage buckets create gs://landfall-sample-landfall-landing" in message
    assert "PERMISSION_DENIED" in message
    assert "run the same command again" in message and "Bucket names are global" in message


def test_teardown_removes_what_exists_skips_what_is_gone_and_keeps_a_bucket_with_objects(plan: Plan) -> None:
    project = FakeProject()
    run(plan, project)
    project.objects_in = {"landfall-sample-landfall-landing"}
    outcomes = Executor(teardown_plan(SAMPLE), project, report=lambda _: None).run()
    kept = [o for o in outcomes if o.action == "kept"]
    assert [o.step.name for o in kept] == ["delete gs://landfall-sample-landfall-landing if it is empty"]
    assert "--delete-data" in kept[0].detail
    assert not any(
        c[1:5] == ["storage", "buckets", "delete", "gs://landfall-sample-landfall-landing"] for c in project.calls
    )
    assert {o.action for o in outcomes} <= {"deleted", "skipped", "kept"}
    assert sum(o.action == "deleted" for o in outcomes) > 25
    again = Executor(teardown_plan(SAMPLE), project, report=lambda _: None).run()
    # A second teardown finds nothing left, but the kept bucket (whose notifications it clears again).
    assert [o.step.name for o in again if o.action not in ("skipped", "kept")] == [
        "delete the notifications of gs://landfall-sample-landfall-landing (a bucket Landfall made)"
    ]


def test_a_dry_run_needs_no_gcloud_and_says_how_a_rerun_converges(plan: Plan) -> None:
    text = dry_run_text(plan)
    assert "describes each resource first" in text
    assert "PROJECT_NUMBER" in text  # no number given: the dry run prints the placeholder rather than guess


def test_teardown_cancels_landfalls_running_jobs_before_deleting_what_they_use(plan: Plan) -> None:
    project = FakeProject()
    run(plan, project)
    project.open_jobs = {"us-central1": ["111", "222"], "europe-west4": ["333"]}
    outcomes = Executor(teardown_plan(SAMPLE), project, report=lambda _: None).run()
    assert project.open_jobs == {"us-central1": [], "europe-west4": []}, "every listed job is cancelled"
    cancelled = [o.detail for o in outcomes if o.step.name.startswith("cancel Landfall's jobs")]
    assert cancelled == ["111, 222", "333"]
    lines = [shlex.join(c) for c in project.calls]
    first_cancel = next(i for i, line in enumerate(lines) if " ai custom-jobs cancel " in line)
    assert lines[first_cancel] == "gcloud ai custom-jobs cancel 111 --region=us-central1 --project=landfall-sample"
    assert first_cancel < next(i for i, line in enumerate(lines) if " iam service-accounts delete " in line)
    again = Executor(teardown_plan(SAMPLE), project, report=lambda _: None).run()
    assert [o.detail for o in again if o.step.name.startswith("cancel Landfall's jobs")] == ["none listed"] * 2


def test_a_teardown_that_cannot_list_jobs_stops_before_deleting_anything_they_use(plan: Plan) -> None:
    project = FakeProject()
    run(plan, project)

    def vertex_refuses(argv: Sequence[str]) -> Result:
        if list(argv[1:4]) == ["ai", "custom-jobs", "list"]:
            return Result(1, "", "ERROR: PERMISSION_DENIED: aiplatform.customJobs.list")
        return project(argv)

    with pytest.raises(StepError, match=r"(?s)cancel Landfall's jobs.*PERMISSION_DENIED.*keeps billing"):
        Executor(teardown_plan(SAMPLE), vertex_refuses, report=lambda _: None).run()
    assert not any(c[1:4] == ["iam", "service-accounts", "delete"] for c in project.calls)


def test_a_fact_that_cannot_be_read_says_what_to_check(plan: Plan) -> None:
    project = FakeProject()

    def no_account(argv: Sequence[str]) -> Result:
        if list(argv[1:3]) == ["projects", "describe"]:
            return Result(1, "", "ERROR: (gcloud.projects.describe) You do not currently have an active account")
        return project(argv)

    with pytest.raises(StepError, match=r"(?s)could not read the project number.*gcloud auth list"):
        Executor(plan, no_account, report=lambda _: None).run()


def test_the_dashboard_converges_and_teardown_removes_it() -> None:
    """With --ui-users: the image is built once (its tag found by the second run), the service is deployed and its
    policy set on every run (both converge by replacing), and teardown deletes the service."""
    project = FakeProject()
    target = Target(SAMPLE.project, SAMPLE.region, "", SAMPLE.job_regions, "golden", ui_users=SAMPLE.ui_users)
    plan = deploy_plan(target, prepare(target))
    run(plan, project)
    image = f"image {SAMPLE.region}-docker.pkg.dev/{SAMPLE.project}/landfall/ui:golden"
    assert {image, "run services landfall-ui"} <= project.existing
    project.calls.clear()
    run(plan, project)
    dashboard = [
        c[1:4] for c in project.calls if "landfall-ui" in c or "--config=.landfall/deploy/ui.cloudbuild.json" in c
    ]
    assert ["builds", "submit", ".landfall/deploy/ui"] not in dashboard, "an unchanged dashboard is not rebuilt"
    assert ["run", "deploy", "landfall-ui"] in dashboard and ["run", "services", "set-iam-policy"] in dashboard
    outcomes = Executor(teardown_plan(SAMPLE), project, report=lambda _: None).run()
    assert "run services landfall-ui" not in project.existing
    assert [o.action for o in outcomes if "landfall-ui" in o.step.name and "Cloud Run" in o.step.name] == ["deleted"]
