"""`landfall deploy --dry-run` / `landfall teardown --dry-run` for a sample project: the golden files, the order of
creation, the IAM grants, the subscriptions, the functions' environment and what the commands name on disk.

The checks read the printed commands the way a reviewer would (tests/golden/*.sh), not the deployer's records, so
a wrong rendering cannot vouch for itself.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import defaultdict
from pathlib import Path

import pytest

from deploy.gcp.config import BASIC_ROLES, load_deploy_config
from deploy.gcp.plan import Target, deploy_plan, function_env, names, prepare
from deploy.gcp.steps import dry_run_text
from deploy.gcp.teardown import teardown_plan
from deploy.images import trainer_image
from functions.settings import settings_from_env
from tests.golden.dry_runs import GOLDEN, GOLDEN_DIR, SAMPLE

P = SAMPLE.project
N = SAMPLE.project_number
SA = "serviceAccount:{}@landfall-sample.iam.gserviceaccount.com".format
LANDING = "landfall-sample-landfall-landing"
CODE = "landfall-sample-landfall-code"
ARTIFACTS = ("landfall-sample-landfall-artifacts-us-central1", "landfall-sample-landfall-artifacts-europe-west4")
FUNCTIONS = (
    "landfall-on-object-finalized",
    "landfall-dispatch",
    "landfall-on-job-event",
    "landfall-sweep-datasets",
    "landfall-reconcile-runs",
)
SUBSCRIPTIONS = (
    "landfall-object-events-ingest",
    "landfall-training-requests-dispatch",
    "landfall-job-events-listener",
    "landfall-ingest-sweep-sweeper",
    "landfall-reconcile-reconciler",
)
DEAD_LETTERS = ("landfall-dead-letter",)  # one for every subscription, as [functions.*] dead_letter names it
DATABASE_ONLY = f'{P} if resource.name=="projects/{P}/databases/(default)"'
"""Firestore's documented per-database condition (cloud.google.com/firestore/docs/manage-databases)."""
BUILD_SOURCES_ONLY = (
    f'{P} if resource.name.startsWith("projects/_/buckets/{P}_cloudbuild") || '
    'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-")'
)
BUILDER = f"landfall-builder@{P}.iam.gserviceaccount.com"


def runs_folder_only(bucket: str) -> str:
    """An artifacts bucket narrowed to its runs/ folder (functions/settings.py runs_prefix)."""
    return f'{bucket} if resource.name.startsWith("projects/_/buckets/{bucket}/objects/runs/")'


JOB_REGIONS = ("us-central1", "europe-west4")
UI_USERS = ("group:ml-team@example.com", "user:ana@example.com")
"""Who may open the sample's dashboard (SAMPLE.ui_users)."""

# What each identity may do, written out by hand for review: (role, resource kind, resource name).
EXPECTED_GRANTS: dict[str, set[tuple[str, str, str]]] = {
    SA("landfall-ingest"): {
        ("roles/storage.objectViewer", "bucket", LANDING),
        ("roles/pubsub.publisher", "topic", "landfall-training-requests"),
        ("roles/datastore.user", "project", DATABASE_ONLY),
    },
    SA("landfall-sweeper"): {
        ("roles/storage.objectViewer", "bucket", LANDING),
        ("roles/pubsub.publisher", "topic", "landfall-training-requests"),
        ("roles/datastore.user", "project", DATABASE_ONLY),
    },
    # Dispatch (and the reconciler, taking over a run whose delivery died) list the dataset before planning.
    SA("landfall-dispatch"): {
        ("roles/storage.objectViewer", "bucket", LANDING),
        ("roles/datastore.user", "project", DATABASE_ONLY),
        ("roles/aiplatform.user", "project", P),
        ("roles/iam.serviceAccountUser", "service_account", "landfall-trainer@landfall-sample.iam.gserviceaccount.com"),
        # the dataset listing a team's code reads, runs/RUN/data-files.jsonl, in every job region's bucket
        *(("roles/storage.objectUser", "bucket", runs_folder_only(b)) for b in ARTIFACTS),
        # the code a run names: its digest goes on the run
        ("roles/storage.objectViewer", "bucket", CODE),
    },
    # The listener resubmits a job that ended for capacity: it submits jobs that run as the trainer account.
    SA("landfall-listener"): {
        ("roles/datastore.user", "project", DATABASE_ONLY),
        ("roles/aiplatform.user", "project", P),
        ("roles/iam.serviceAccountUser", "service_account", "landfall-trainer@landfall-sample.iam.gserviceaccount.com"),
        *(("roles/storage.objectViewer", "bucket", b) for b in ARTIFACTS),
        ("roles/pubsub.publisher", "topic", "landfall-run-results"),
    },
    SA("landfall-reconciler"): {
        ("roles/storage.objectViewer", "bucket", LANDING),
        ("roles/datastore.user", "project", DATABASE_ONLY),
        ("roles/aiplatform.user", "project", P),
        ("roles/iam.serviceAccountUser", "service_account", "landfall-trainer@landfall-sample.iam.gserviceaccount.com"),
        *(("roles/storage.objectViewer", "bucket", b) for b in ARTIFACTS),
        *(("roles/storage.objectUser", "bucket", runs_folder_only(b)) for b in ARTIFACTS),  # adopts runs as dispatch
        ("roles/storage.objectViewer", "bucket", CODE),  # as dispatch: the code's digest
        ("roles/pubsub.publisher", "topic", "landfall-run-results"),
        # republishes a TrainingRequest whose message was lost (reconciler/republish.py)
        ("roles/pubsub.publisher", "topic", "landfall-training-requests"),
    },
    SA("landfall-trainer"): {
        ("roles/storage.objectViewer", "bucket", LANDING),
        ("roles/storage.objectViewer", "bucket", CODE),  # teams' scripts and packages
        *(("roles/storage.objectUser", "bucket", b) for b in ARTIFACTS),
    },
    # Cloud Build's identity for the image and every function (cloud.google.com/functions/docs/securing/build-custom-sa)
    SA("landfall-builder"): {
        ("roles/logging.logWriter", "project", P),
        ("roles/artifactregistry.writer", "project", P),
        ("roles/storage.objectViewer", "project", BUILD_SOURCES_ONLY),
    },
    SA("landfall-invoker"): {("roles/run.invoker", "function", f) for f in FUNCTIONS},
    # The dashboard reads records, jobs and models, artifacts and job logs; it writes nothing (no --ui-actions).
    SA("landfall-ui"): {
        ("roles/datastore.viewer", "project", DATABASE_ONLY),
        ("roles/aiplatform.viewer", "project", P),
        *(("roles/storage.objectViewer", "bucket", b) for b in ARTIFACTS),
        ("roles/logging.viewer", "project", P),
    },
    # The deployment's users, and no one else, may invoke the dashboard's service.
    **{user: {("roles/run.invoker", "run_service", "landfall-ui")} for user in UI_USERS},
    f"serviceAccount:service-{N}@gs-project-accounts.iam.gserviceaccount.com": {
        ("roles/pubsub.publisher", "topic", "landfall-object-events")
    },
    f"serviceAccount:service-{N}@gcp-sa-logging.iam.gserviceaccount.com": {
        ("roles/pubsub.publisher", "topic", "landfall-job-events")
    },
    f"serviceAccount:service-{N}@gcp-sa-pubsub.iam.gserviceaccount.com": {
        *(("roles/pubsub.publisher", "topic", t) for t in DEAD_LETTERS),
        *(("roles/pubsub.subscriber", "subscription", s) for s in SUBSCRIPTIONS),
        (
            "roles/iam.serviceAccountTokenCreator",
            "service_account",
            "landfall-invoker@landfall-sample.iam.gserviceaccount.com",
        ),
    },
}


def commands(text: str) -> list[list[str]]:
    return [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]


def flags(argv: list[str]) -> dict[str, str]:
    pairs = (arg[2:].partition("=") for arg in argv if arg.startswith("--"))
    return {key: value for key, _, value in pairs}


def positional(argv: list[str], after: int) -> str:
    return next(arg for arg in argv[after:] if not arg.startswith("--"))


@pytest.fixture(scope="module")
def deploy_text() -> str:
    return GOLDEN["deploy_dry_run.sh"]()


@pytest.fixture(scope="module")
def deployed(deploy_text: str) -> list[list[str]]:
    return commands(deploy_text)


def test_dry_runs_match_the_golden_files(deploy_text: str) -> None:
    rendered = {"deploy_dry_run.sh": deploy_text, "teardown_dry_run.sh": GOLDEN["teardown_dry_run.sh"]()}
    for name, text in rendered.items():
        golden = (GOLDEN_DIR / name).read_text()
        assert text == golden, (
            f"tests/golden/{name} differs: if deliberate, run `.venv/bin/python -m "
            "tests.golden.dry_runs` and review the diff"
        )


def test_every_line_is_a_comment_or_one_complete_gcloud_command(deploy_text: str) -> None:
    for line in deploy_text.splitlines():
        assert not line or line.startswith("# ") or line == "#" or shlex.split(line)[0] == "gcloud", line
        if line and not line.startswith("#"):
            assert shlex.join(shlex.split(line)) == line, f"not shell-quoted as shlex.join would: {line}"


# --- order: nothing named before the command that creates it -------------------------------------------------


def created(argv: list[str]) -> set[str]:
    """Resources a deploy command creates, as kind:name."""
    words = tuple(argv[1:5])
    if words[:3] == ("iam", "service-accounts", "create"):
        return {f"sa:{argv[4]}@{P}.iam.gserviceaccount.com"}
    if words[:3] == ("pubsub", "topics", "create"):
        return {f"topic:{argv[4]}"}
    if words[:3] == ("pubsub", "schemas", "create"):
        return {f"schema:{argv[4]}"}
    if words[:3] == ("pubsub", "subscriptions", "create"):
        return {f"subscription:{argv[4]}"}
    if words[:3] == ("storage", "buckets", "create"):
        return {f"bucket:{argv[4].removeprefix('gs://')}"}
    if words[:3] == ("artifacts", "repositories", "create"):
        return {f"repository:{flags(argv)['location']}/{argv[4]}"}
    if words[:2] == ("functions", "deploy"):
        return {f"function:{argv[3]}"}
    if words[:2] == ("run", "deploy"):
        return {f"run_service:{argv[3]}"}
    if words[:3] == ("logging", "sinks", "create"):
        return {f"sink:{argv[4]}"}
    if words[:3] == ("firestore", "databases", "create"):
        return {"firestore:(default)"}
    if words[:2] == ("builds", "submit"):
        return {f"image:{uri}" for uri in built_images(argv)}
    if words[:2] == ("services", "enable"):
        return {f"api:{a}" for a in argv[3:] if not a.startswith("--")}
    return set()


def built_images(argv: list[str]) -> list[str]:
    """The images a `gcloud builds submit --config=FILE` pushes: its staged config's `images`."""
    config = json.loads((GOLDEN_DIR.parents[1] / flags(argv)["config"]).read_text())
    images = config["images"]
    assert isinstance(images, list)
    return [str(uri) for uri in images]


def referred(argv: list[str]) -> set[str]:
    """Resources a command names without creating them (only those a deployment makes; Google's own agents and
    the project itself exist already)."""
    refs: set[str] = set()
    f = flags(argv)
    for key in ("topic", "dead-letter-topic"):
        if key in f:
            refs.add(f"topic:{f[key].rsplit('/', 1)[-1]}")
    if "schema" in f:
        refs.add(f"schema:{f['schema']}")
    for key in ("member", "service-account", "push-auth-service-account", "build-service-account"):
        email = f.get(key, "").removeprefix("serviceAccount:").rsplit("/", 1)[-1]
        if email.endswith(f"@{P}.iam.gserviceaccount.com"):
            refs.add(f"sa:{email}")
    if "push-endpoint" in f:
        refs.add(f"function:{f['push-endpoint'].rsplit('/', 1)[-1]}")
    if argv[1:3] == ["builds", "submit"]:
        refs |= {f"repository:{uri.split('-docker.pkg.dev')[0]}/{uri.split('/')[2]}" for uri in built_images(argv)}
    if argv[1:4] in (["pubsub", "topics", "add-iam-policy-binding"], ["pubsub", "topics", "update"]):
        refs.add(f"topic:{argv[4]}")
    if argv[1:4] in (["pubsub", "subscriptions", "add-iam-policy-binding"], ["pubsub", "subscriptions", "update"]):
        refs.add(f"subscription:{argv[4]}")
    if argv[1:3] == ["storage", "buckets"] and argv[3] != "create":
        refs.add(f"bucket:{next(a for a in argv if a.startswith('gs://')).removeprefix('gs://')}")
    if argv[1:4] == ["iam", "service-accounts", "add-iam-policy-binding"]:
        refs.add(f"sa:{argv[4]}")
    if argv[1:3] == ["functions", "add-invoker-policy-binding"]:
        refs.add(f"function:{argv[3]}")
    if argv[1:3] == ["run", "services"]:
        refs.add(f"run_service:{argv[4]}")
    if "image" in f:
        refs.add(f"image:{f['image']}")
    if argv[1:3] == ["firestore", "indexes"]:
        refs.add("firestore:(default)")
    if argv[1:4] in (["logging", "sinks", "create"], ["logging", "sinks", "update"]):
        refs.add(f"topic:{positional(argv, 5).rsplit('/', 1)[-1]}")
    if "env-vars-file" in f:
        env_file = GOLDEN_DIR.parents[1] / f["env-vars-file"]
        env = dict(line.split(": ", 1) for line in env_file.read_text().splitlines())
        refs.add(f"image:{env['LANDFALL_TRAINER_IMAGE'].strip(chr(34))}")
        refs |= {f"bucket:{b.split('=')[1]}" for b in env["LANDFALL_ARTIFACT_BUCKETS"].strip('"').split(",")}
    return refs


def test_nothing_is_named_before_the_command_that_creates_it(deployed: list[list[str]]) -> None:
    assert deployed[0][1:3] == ["services", "enable"], "APIs come first"
    made: set[str] = set()
    for index, argv in enumerate(deployed):
        missing = referred(argv) - made - created(argv)
        assert not missing, f"line {index}: {shlex.join(argv)}\n  names {missing} before they are created"
        made |= created(argv)
    kinds = {name.split(":")[0] for name in made}
    assert kinds >= {
        "sa",
        "topic",
        "schema",
        "subscription",
        "bucket",
        "repository",
        "function",
        "sink",
        "image",
        "run_service",
        "firestore",
        "api",
    }


def test_traffic_starts_only_once_every_listener_exists(deployed: list[list[str]]) -> None:
    position = {shlex.join(argv): i for i, argv in enumerate(deployed)}
    last_subscription = max(i for c, i in position.items() if " pubsub subscriptions create " in c)
    for starter in (" storage buckets notifications create ", " logging sinks create ", " scheduler jobs create "):
        assert min(i for c, i in position.items() if starter in c) > last_subscription, starter


def test_teardown_deletes_what_refers_before_what_is_referred_to(deployed: list[list[str]]) -> None:
    # What a deleted resource used, as deploy made it: a subscription its topics, a function its account.
    uses = {
        f"subscription:{argv[4]}": referred(argv)
        for argv in deployed
        if argv[1:4] == ["pubsub", "subscriptions", "create"]
    }
    uses |= {f"function:{argv[3]}": referred(argv) for argv in deployed if argv[1:3] == ["functions", "deploy"]}
    uses |= {f"run_service:{argv[3]}": referred(argv) for argv in deployed if argv[1:3] == ["run", "deploy"]}
    deleted: set[str] = set()
    for argv in commands(GOLDEN["teardown_dry_run.sh"]()):
        gone = (
            {f"topic:{argv[4]}"}
            if argv[1:4] == ["pubsub", "topics", "delete"]
            else {f"sa:{argv[4]}"}
            if argv[1:4] == ["iam", "service-accounts", "delete"]
            else {f"bucket:{argv[4].removeprefix('gs://')}"}
            if argv[1:4] == ["storage", "buckets", "delete"]
            else set()
        )
        names_used = referred(argv)
        if argv[1:4] == ["pubsub", "subscriptions", "delete"]:
            names_used |= uses.get(f"subscription:{argv[4]}", set())
        if argv[1:3] == ["functions", "delete"]:
            names_used |= uses[f"function:{argv[3]}"]
        if argv[1:4] == ["run", "services", "delete"]:
            names_used |= uses[f"run_service:{argv[4]}"]
        still = names_used & deleted
        assert not still, f"{shlex.join(argv)} names {still}, deleted earlier"
        deleted |= gone
    assert len(deleted) == 7 + 9 + 4  # topics (4, the reconcile tick, run results, dead letters), accounts, buckets


# --- IAM -------------------------------------------------------------------------------------------------------


def grants(deployed: list[list[str]]) -> dict[str, set[tuple[str, str, str]]]:
    held: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    for argv in deployed:
        f = flags(argv)
        if argv[1:3] == ["projects", "add-iam-policy-binding"]:
            condition = f["condition"]
            expression = condition.partition(",title=")[0].removeprefix("expression=")
            held[f["member"]].add(
                (f["role"], "project", argv[3] if condition == "None" else f"{argv[3]} if {expression}")
            )
        elif argv[1:3] == ["functions", "add-invoker-policy-binding"]:
            held[f["member"]].add(("roles/run.invoker", "function", argv[3]))
        elif argv[1:4] == ["run", "services", "set-iam-policy"]:
            policy = json.loads((GOLDEN_DIR.parents[1] / argv[5]).read_text())
            for binding in policy["bindings"]:
                for member in binding["members"]:
                    held[member].add((binding["role"], "run_service", argv[4]))
        elif "add-iam-policy-binding" in argv[3:5]:
            kind = {
                "topics": "topic",
                "subscriptions": "subscription",
                "service-accounts": "service_account",
                "buckets": "bucket",
            }[argv[2]]
            name = argv[4].removeprefix("gs://")
            if "condition" in f:  # a bucket's conditional grant (every bucket has uniform bucket-level access)
                expression = f["condition"].partition(",title=")[0].removeprefix("expression=")
                name = f"{name} if {expression}"
            held[f["member"]].add((f["role"], kind, name))
    return dict(held)


def test_no_basic_role_anywhere(deployed: list[list[str]]) -> None:
    roles = {flags(argv).get("role") for argv in deployed}
    assert not roles & BASIC_ROLES
    assert all(
        not arg.startswith("--role=roles/") or arg.split("=")[1] not in BASIC_ROLES for argv in deployed for arg in argv
    )


def test_each_identity_holds_exactly_its_listed_roles(deployed: list[list[str]]) -> None:
    assert grants(deployed) == EXPECTED_GRANTS


def test_the_topology_lists_the_same_roles_as_this_review() -> None:
    config = load_deploy_config()
    for account in config.service_accounts:
        listed = {g.role for g in account.grants}
        assert listed == {role for role, _, _ in EXPECTED_GRANTS[SA(account.account_id)]}, account.key


def test_every_push_subscription_is_authenticated_with_a_dead_letter_topic_and_back_off(
    deployed: list[list[str]],
) -> None:
    subscriptions = [
        argv
        for argv in deployed
        if argv[1:4] == ["pubsub", "subscriptions", "create"] and "push-endpoint" in flags(argv)
    ]
    assert sorted(argv[4] for argv in subscriptions) == sorted(SUBSCRIPTIONS)
    for argv in subscriptions:
        f = flags(argv)
        assert f["dead-letter-topic"] in DEAD_LETTERS
        assert 5 <= int(f["max-delivery-attempts"]) <= 100
        assert f["min-retry-delay"].endswith("s") and f["max-retry-delay"].endswith("s")
        assert int(f["min-retry-delay"][:-1]) <= int(f["max-retry-delay"][:-1]) <= 600
        assert f["push-auth-service-account"] == f"landfall-invoker@{P}.iam.gserviceaccount.com"
        assert f["push-endpoint"].startswith("https://")
    holds = {
        argv[4]
        for argv in deployed
        if argv[1:4] == ["pubsub", "subscriptions", "create"] and "push-endpoint" not in flags(argv)
    }
    assert holds == {"landfall-dead-letter-hold"}, "a dead-letter topic without a subscription loses messages"


def test_functions_refuse_unauthenticated_calls_and_time_out_with_their_ack_deadline(deployed: list[list[str]]) -> None:
    functions = {argv[3]: flags(argv) for argv in deployed if argv[1:3] == ["functions", "deploy"]}
    assert sorted(functions) == sorted(FUNCTIONS)
    ack = {
        flags(argv)["push-endpoint"].rsplit("/", 1)[1]: flags(argv)["ack-deadline"]
        for argv in deployed
        if "push-endpoint" in flags(argv)
    }
    for name, f in functions.items():
        assert "no-allow-unauthenticated" in f and "allow-unauthenticated" not in f
        assert "trigger-http" in f and "gen2" in f
        assert re.fullmatch(r"python3\d+", f["runtime"]) and int(f["runtime"][7:]) >= 12
        assert f["timeout"] == f"{ack[name]}s"
        assert f["service-account"].startswith("landfall-") and f["min-instances"] == "0"


def test_buckets_are_private_with_uniform_access(deployed: list[list[str]]) -> None:
    buckets = {argv[4]: flags(argv) for argv in deployed if argv[1:4] == ["storage", "buckets", "create"]}
    assert sorted(buckets) == sorted(f"gs://{b}" for b in (LANDING, CODE, *ARTIFACTS))
    assert all("uniform-bucket-level-access" in f and "public-access-prevention" in f for f in buckets.values())
    assert buckets[f"gs://{ARTIFACTS[1]}"]["location"] == "europe-west4"


def test_the_notification_carries_finalized_objects_of_routed_prefixes_only(deployed: list[list[str]]) -> None:
    notifications = [flags(argv) for argv in deployed if argv[1:5] == ["storage", "buckets", "notifications", "create"]]
    assert sorted(f["object-prefix"] for f in notifications) == ["datasets/", "exports/", "regression/"]
    assert all(f["event-types"] == "OBJECT_FINALIZE" and f["payload-format"] == "json" for f in notifications)
    assert all(f["topic"] == f"projects/{P}/topics/landfall-object-events" for f in notifications)


def test_the_log_sink_carries_vertex_job_entries(deployed: list[list[str]]) -> None:
    sink = next(argv for argv in deployed if argv[1:4] == ["logging", "sinks", "create"])
    assert sink[5] == f"pubsub.googleapis.com/projects/{P}/topics/landfall-job-events"
    assert 'resource.type="ml_job"' in flags(sink)["log-filter"]


# --- the functions' environment ---------------------------------------------------------------------------------


def test_function_env_is_read_by_the_settings_record_as_deployed() -> None:
    n = names(SAMPLE)
    image = f"us-central1-docker.pkg.dev/{P}/landfall/trainer:golden"
    settings = settings_from_env(function_env(n, image))
    assert settings.project == P
    assert settings.landing_bucket == LANDING and settings.allowed_buckets == (LANDING,)
    assert settings.output_bucket == ARTIFACTS[0]
    assert dict(settings.artifact_buckets) == {"us-central1": ARTIFACTS[0], "europe-west4": ARTIFACTS[1]}
    assert settings.trainer_image == image
    assert settings.training_service_account == f"landfall-trainer@{P}.iam.gserviceaccount.com"
    # the code bucket the deployment made (and the trainer account reads) is the one scripts must come from
    assert settings.code_bucket == CODE
    assert settings.output_bucket != settings.landing_bucket, "artifacts in the landing bucket would fire ingest"


def test_teardown_keeps_data_unless_told_and_then_deletes_it() -> None:
    kept = dry_run_text(teardown_plan(SAMPLE))
    assert "gcloud storage rm" not in kept and "firestore databases delete" not in kept
    assert kept.count("gcloud storage buckets delete") == 4
    every = dry_run_text(teardown_plan(Target(P, "us-central1", N, ("europe-west4",), delete_data=True)))
    assert every.count("gcloud storage rm --recursive") == 4
    assert "gcloud firestore databases delete '--database=(default)'" in every
    assert all(line.endswith("--quiet") for line in every.splitlines() if " delete " in line and "gcloud" in line)


def test_staged_paths_are_relative_to_the_repository_root(deployed: list[list[str]]) -> None:
    staged = [flags(argv)["source"] for argv in deployed if argv[1:3] == ["functions", "deploy"]]
    assert staged == [
        f".landfall/deploy/functions/{n}"
        for n in ("on_object_finalized", "dispatch", "on_job_event", "sweep_datasets", "reconcile_runs")
    ]
    assert not any(Path(s).is_absolute() for s in staged)


# --- the build identity, the APIs, images where jobs run, Firestore scoped, running jobs cancelled ------


def test_firestore_access_is_scoped_to_landfalls_database(deployed: list[list[str]]) -> None:
    """roles/datastore.user is granted under the documented per-database condition, never project-wide."""
    holders = {
        member: roles
        for member, roles in grants(deployed).items()
        if any(r[0] == "roles/datastore.user" for r in roles)
    }
    assert len(holders) == 5
    for member, roles in holders.items():
        assert {r[2] for r in roles if r[0] == "roles/datastore.user"} == {DATABASE_ONLY}, member


def test_builds_run_as_a_builder_account_holding_the_documented_roles(deployed: list[list[str]]) -> None:
    """Since 2024 a new project's default build identity may lack what builds need: every build names its own."""
    identity = f"projects/{P}/serviceAccounts/{BUILDER}"
    builds = [flags(argv) for argv in deployed if argv[1:3] == ["builds", "submit"]]
    functions = [flags(argv) for argv in deployed if argv[1:3] == ["functions", "deploy"]]
    assert [b["service-account"] for b in builds] == [identity] * 2, "the trainer images' build and the dashboard's"
    assert [f["build-service-account"] for f in functions] == [identity] * len(FUNCTIONS)
    assert {role for role, _, _ in grants(deployed)[f"serviceAccount:{BUILDER}"]} == {
        "roles/logging.logWriter",
        "roles/artifactregistry.writer",
        "roles/storage.objectViewer",
    }


def test_compute_is_enabled_and_the_image_build_has_time_for_a_cuda_image(deployed: list[list[str]]) -> None:
    enabled = deployed[0][3:]
    assert "compute.googleapis.com" in enabled
    timeout = flags(next(argv for argv in deployed if argv[1:3] == ["builds", "submit"]))["timeout"]
    assert timeout.endswith("s") and int(timeout[:-1]) >= 1800, "Cloud Build's default 10 minutes is too short"


def test_the_image_is_pushed_to_a_repository_in_every_job_region(deployed: list[list[str]]) -> None:
    repositories = {
        flags(argv)["location"] for argv in deployed if argv[1:4] == ["artifacts", "repositories", "create"]
    }
    assert repositories == set(JOB_REGIONS)
    build = next(argv for argv in deployed if argv[1:3] == ["builds", "submit"])
    assert built_images(build) == [
        f"{r}-docker.pkg.dev/{P}/landfall/{name}:golden" for name in ("trainer", "trainer-cu130") for r in JOB_REGIONS
    ]
    config = json.loads((GOLDEN_DIR.parents[1] / flags(build)["config"]).read_text())
    assert config["options"]["logging"] == "CLOUD_LOGGING_ONLY", "a user-specified build account needs it"
    # One docker build per CUDA line, from its manifest: the base image and the capabilities its torch must carry.
    for step, build_spec in zip(config["steps"], trainer_image().builds, strict=True):
        assert step["id"] == build_spec.name
        assert f"BASE_IMAGE={build_spec.base_image}" in step["args"]
        assert f"COMPUTE_CAPABILITIES={' '.join(build_spec.compute_capabilities)}" in step["args"]
        assert [step["args"][i + 1] for i, a in enumerate(step["args"]) if a == "--tag"] == [
            f"{r}-docker.pkg.dev/{P}/landfall/{build_spec.name}:golden" for r in JOB_REGIONS
        ]
    teardown = commands(GOLDEN["teardown_dry_run.sh"]())
    deleted = {flags(a)["location"] for a in teardown if a[1:4] == ["artifacts", "repositories", "delete"]}
    assert deleted == set(JOB_REGIONS)


def test_a_job_in_another_job_region_runs_the_image_from_its_own_region() -> None:
    """The dispatcher names the image in the job's region, which the build pushed: no pull across regions."""
    image = f"us-central1-docker.pkg.dev/{P}/landfall/trainer:golden"
    settings = settings_from_env(function_env(names(SAMPLE), image))
    assert settings.trainer_image_for("europe-west4") == f"europe-west4-docker.pkg.dev/{P}/landfall/trainer:golden"
    assert settings.trainer_image_for("us-central1") == image
    assert settings.trainer_image_for("asia-east1") == image, "no repository there: the image as configured"
    # The B200 build: its own image name, the same tag, in the job's region.
    assert (
        settings.trainer_image_for("europe-west4", "trainer-cu130")
        == f"europe-west4-docker.pkg.dev/{P}/landfall/trainer-cu130:golden"
    )


def test_teardown_cancels_landfalls_open_jobs_in_every_job_region_before_deleting_accounts() -> None:
    text = dry_run_text(teardown_plan(SAMPLE))
    lines = [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]
    cancels = [i for i, argv in enumerate(lines) if argv[1:4] == ["ai", "custom-jobs", "cancel"]]
    assert sorted(flags(lines[i])["region"] for i in cancels) == sorted(JOB_REGIONS)
    first_account_deleted = min(i for i, a in enumerate(lines) if a[1:4] == ["iam", "service-accounts", "delete"])
    last_function_deleted = max(i for i, a in enumerate(lines) if a[1:3] == ["functions", "delete"])
    assert last_function_deleted < min(cancels) and max(cancels) < first_account_deleted
    assert "labels.landfall=run AND state:(JOB_STATE_QUEUED JOB_STATE_PENDING JOB_STATE_RUNNING)" in text


def test_a_dry_run_without_the_project_number_prints_a_placeholder() -> None:
    target = Target(P, "us-central1", "", ("europe-west4",), "golden")
    text = dry_run_text(deploy_plan(target, prepare(target)))
    assert "serviceAccount:service-PROJECT_NUMBER@gs-project-accounts.iam.gserviceaccount.com" in text
    assert "serviceAccount:service-PROJECT_NUMBER@gcp-sa-logging.iam.gserviceaccount.com here" in text
    assert "gcloud projects describe landfall-sample '--format=value(projectNumber)'" in text


def test_a_teams_own_requests_topic_is_created_with_the_schema_and_pushed_to_the_dispatcher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each team's requests topic (deploy/teams.toml) gets the TrainingRequest schema and a push
    subscription to the dispatcher with the shared topic's delivery settings; the dispatcher knows the team by it."""
    import tomllib

    from deploy.gcp import plan as deploy_plan_module
    from deploy.teams import parse_teams

    teams = parse_teams(
        tomllib.loads(
            '[[teams]]\nname = "vision"\nowns = [{prefix = "datasets/vision/"}]\nmonthly_budget_usd = 10\n'
            'requests_topic = "landfall-requests-vision"\n'
        )
    )
    monkeypatch.setattr(deploy_plan_module, "read_teams", lambda: teams)
    argvs = commands(dry_run_text(deploy_plan(SAMPLE, prepare(SAMPLE))))
    topic = next(a for a in argvs if a[1:4] == ["pubsub", "topics", "create"] and a[4] == "landfall-requests-vision")
    assert flags(topic)["schema"] and flags(topic)["message-encoding"] == "json"
    sub = next(a for a in argvs if a[1:4] == ["pubsub", "subscriptions", "create"] and a[4].endswith("vision-dispatch"))
    shared = next(
        a
        for a in argvs
        if a[1:4] == ["pubsub", "subscriptions", "create"] and a[4] == "landfall-training-requests-dispatch"
    )
    assert flags(sub)["topic"] == "landfall-requests-vision"
    assert (
        flags(sub)["push-endpoint"]
        == f"{flags(shared)['push-endpoint']}/projects/landfall-sample/topics/landfall-requests-vision"
    )
    assert {k: v for k, v in flags(sub).items() if k not in ("topic", "push-endpoint")} == {
        k: v for k, v in flags(shared).items() if k not in ("topic", "push-endpoint")
    }
    assert argvs.index(topic) < argvs.index(sub)
    assert teams.by_subscription(f"projects/p/subscriptions/{sub[4]}") is teams.teams[0]
    from deploy.gcp import teardown as teardown_module

    monkeypatch.setattr(teardown_module, "read_teams", lambda: teams)
    gone = commands(dry_run_text(teardown_plan(SAMPLE)))
    deleted_sub = gone.index(
        ["gcloud", "pubsub", "subscriptions", "delete", sub[4], "--project=landfall-sample", "--quiet"]
    )
    deleted_topic = gone.index(
        ["gcloud", "pubsub", "topics", "delete", topic[4], "--project=landfall-sample", "--quiet"]
    )
    assert deleted_sub < deleted_topic


def test_the_runs_folder_condition_names_the_folder_the_functions_write() -> None:
    """The conditional grant that lets dispatch and the reconciler write a run's listing covers exactly the runs
    folder the functions write under (the topology's runs_prefix)."""
    from deploy.topology import load_topology

    condition = load_deploy_config().condition("runs_folder")
    prefix = load_topology().runs_prefix
    assert condition.flag(P, "(default)", "b").startswith(
        f'expression=resource.name.startsWith("projects/_/buckets/b/objects/{prefix}")'
    )


MEMBERS = """
operators = ["user:ops@example.com"]
[[teams]]
name = "vision"
owns = [{bucket = "*", prefix = "datasets/vision/"}, {bucket = "vision-raw", prefix = ""}]
monthly_budget_usd = 10
requests_topic = "landfall-requests-vision"
members = ["user:ana@example.com", "group:vision@example.com"]
"""


def test_a_teams_members_get_objects_under_its_prefixes_publish_on_its_topic_and_the_dashboard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each member: objectUser on the landing bucket narrowed to the team's prefixes there (and to listing under
    them), on the code bucket narrowed to the team's folder, publisher on the team's topic; members and operators
    open the dashboard; nothing project-wide, and nothing on a bucket that is not the deployment's."""
    import tomllib

    from deploy.gcp import plan as deploy_plan_module
    from deploy.teams import parse_teams

    teams = parse_teams(tomllib.loads(MEMBERS))
    monkeypatch.setattr(deploy_plan_module, "read_teams", lambda: teams)
    target = Target(**{**vars(SAMPLE), "ui_users": ("user:deployer@example.com",)})
    text = dry_run_text(deploy_plan(target, prepare(target)))
    argvs = commands(text)
    n = names(target, deploy_plan_module.load_topology(), load_deploy_config())
    for member in ("user:ana@example.com", "group:vision@example.com"):
        mine = [a for a in argvs if f"--member={member}" in a]
        landing = next(
            a
            for a in mine
            if a[1:4] == ["storage", "buckets", "add-iam-policy-binding"] and a[4] == f"gs://{n.landing_bucket}"
        )
        assert flags(landing)["role"] == "roles/storage.objectUser"
        condition = flags(landing)["condition"]
        assert (
            f'resource.name.startsWith("projects/_/buckets/{n.landing_bucket}/objects/datasets/vision/")' in condition
        )
        assert "title=landfall-team-vision-data" in condition and "vision-raw" not in condition
        assert 'api.getAttribute("storage.googleapis.com/objectListPrefix", "").startsWith("datasets/vision/")' in (
            condition
        )
        code = next(
            a
            for a in mine
            if a[1:4] == ["storage", "buckets", "add-iam-policy-binding"] and a[4] == f"gs://{n.code_bucket}"
        )
        assert '/objects/teams/vision/")' in flags(code)["condition"]
        topic = next(a for a in mine if a[1:4] == ["pubsub", "topics", "add-iam-policy-binding"])
        assert topic[4] == "landfall-requests-vision" and flags(topic)["role"] == "roles/pubsub.publisher"
        assert not [a for a in mine if a[1:3] == ["projects", "add-iam-policy-binding"]], "nothing project-wide"
        assert len(mine) == 3, mine
    from deploy.gcp.bundles import STAGE_DIR

    policy = json.loads((STAGE_DIR / "ui.policy.json").read_text())
    invokers = next(b["members"] for b in policy["bindings"] if b["role"] == "roles/run.invoker")
    expected = {"user:deployer@example.com", "user:ops@example.com", "user:ana@example.com", "group:vision@example.com"}
    assert set(invokers) == expected


def test_each_team_gets_a_trainer_identity_that_reads_its_data_and_code_and_writes_its_runs_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tomllib

    from deploy.gcp import plan as deploy_plan_module
    from deploy.teams import parse_teams

    teams = parse_teams(tomllib.loads(MEMBERS))
    monkeypatch.setattr(deploy_plan_module, "read_teams", lambda: teams)
    argvs = commands(dry_run_text(deploy_plan(SAMPLE, prepare(SAMPLE))))
    n = names(SAMPLE, deploy_plan_module.load_topology(), load_deploy_config())
    email = "lf-team-vision@landfall-sample.iam.gserviceaccount.com"
    created = next(a for a in argvs if a[1:4] == ["iam", "service-accounts", "create"] and a[4] == "lf-team-vision")
    granted = [a for a in argvs if f"--member=serviceAccount:{email}" in a]
    assert argvs.index(created) < min(argvs.index(a) for a in granted)
    by_bucket = {a[4]: a for a in granted if a[1:3] == ["storage", "buckets"]}
    landing = by_bucket[f"gs://{n.landing_bucket}"]
    assert (
        flags(landing)["role"] == "roles/storage.objectViewer"
        and "/objects/datasets/vision/" in flags(landing)["condition"]
    )
    assert "/objects/teams/vision/" in flags(by_bucket[f"gs://{n.code_bucket}"])["condition"]
    for bucket in n.artifact_buckets:
        runs = by_bucket[f"gs://{bucket}"]
        assert flags(runs)["role"] == "roles/storage.objectUser"
        assert f'startsWith("projects/_/buckets/{bucket}/objects/runs/vision/")' in flags(runs)["condition"]
    assert not [a for a in granted if a[1:3] == ["projects", "add-iam-policy-binding"]], "nothing project-wide"
    act_as = [a for a in argvs if a[1:4] == ["iam", "service-accounts", "add-iam-policy-binding"] and a[4] == email]
    assert {flags(a)["member"].split(":")[1].split("@")[0] for a in act_as} == {
        "landfall-dispatch",
        "landfall-listener",
        "landfall-reconciler",
    }
    env = function_env(n, "image", {})
    assert env["LANDFALL_TEAM_SERVICE_ACCOUNT"] == "{team}@landfall-sample.iam.gserviceaccount.com"
    settings = settings_from_env(env)
    assert settings.service_account_for("vision") == email


def test_a_team_with_more_prefixes_than_one_condition_holds_is_refused_naming_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tomllib

    from deploy.gcp import plan as deploy_plan_module
    from deploy.gcp.config import DeployConfigError
    from deploy.teams import parse_teams

    owns = ", ".join(f'{{bucket = "*", prefix = "d{i}/"}}' for i in range(7))
    teams = parse_teams(tomllib.loads(f'[[teams]]\nname = "wide"\nowns = [{owns}]\nmonthly_budget_usd = 10\n'))
    monkeypatch.setattr(deploy_plan_module, "read_teams", lambda: teams)
    with pytest.raises(
        DeployConfigError, match=r"team 'wide' has 7 prefixes .* at most 12 logical operators, which is 6"
    ):
        deploy_plan(SAMPLE, prepare(SAMPLE))
