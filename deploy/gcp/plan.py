"""deploy/topology.toml rendered into the ordered gcloud steps that deploy Landfall to a project.

Order is the point: each resource is created before any command names it (APIs, then the database, accounts,
buckets, topics, grants, the trainer image, the functions, their subscriptions, and last what starts traffic:
the bucket notification, the log sink and the schedules, so that no event is published before someone listens).
teardown.py goes the other way. Nothing here runs a command: execute.py does, dry_run_text prints.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from deploy.gcp import iam, ui
from deploy.gcp.bundles import (
    REPO_ROOT,
    FunctionBundle,
    record_settings,
    stage_build_config,
    stage_function,
    stage_trainer,
)
from deploy.gcp.config import DeployConfig, delivery_policy, job_events_log_filter, load_deploy_config
from deploy.gcp.firestore import CompositeIndex, listed_indexes, load_indexes
from deploy.gcp.iam import DATABASE, Names, Resource
from deploy.gcp.steps import Arg, Argv, Fact, Later, Plan, Step
from deploy.gcp.team_access import account_steps, dashboard_users, member_steps, submitters
from deploy.gcp.ui import StagedUi
from deploy.images import trainer_image
from deploy.teams import read_teams
from deploy.topology import Topology, load_topology
from schemas.gpus import sm_name
from schemas.times import format_timestamp

BEFORE_FUNCTIONS = frozenset({"project", "bucket", "topic", "service_account"})


@dataclass(frozen=True)
class Target:
    """Where to deploy. project_number: in the Google-managed identities' names (a dry run without it prints the
    placeholder PROJECT_NUMBER; a deployment looks it up). job_regions: regions besides `region` that Vertex jobs
    may run in."""

    project: str
    region: str
    project_number: str = ""
    job_regions: tuple[str, ...] = ()
    image_tag: str = ""
    delete_data: bool = False
    ui_users: tuple[str, ...] = ()
    """Principals (user:, group:, serviceAccount:, domain:) who may open the dashboard; none: it is not deployed."""
    ui_actions: tuple[str, ...] = ()
    """What the dashboard may do besides reading ([gcp.ui.actions.*]); none: read-only."""

    def regions(self, config: DeployConfig) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.region, *config.job_regions, *self.job_regions)))


@dataclass(frozen=True)
class Prepared:
    """A staged deployment: what the plan's commands name on disk, and the image they build."""

    bundles: dict[str, FunctionBundle]
    trainer_context: Path
    image_uri: str
    env: dict[str, str] = field(default_factory=dict)
    image_uris: dict[str, str] = field(default_factory=dict)
    """Job region -> the trainer image in that region's repository (the build pushes every one: a job pulls from
    its own region)."""
    build_config: Path = Path()
    """The staged Cloud Build config that builds each image build once and pushes it to every job region."""
    build_uris: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Image build (deploy/topology.toml [[trainer_image.builds]]) -> its URI in every job region."""
    ui: StagedUi | None = None
    """The dashboard's staged files and image (None: not deployed, --no-ui)."""


def names(target: Target, topology: Topology | None = None, config: DeployConfig | None = None) -> Names:
    config = config or load_deploy_config()
    return iam.names_for(topology or load_topology(), config, target.project, target.region, target.regions(config))


def function_env(
    n: Names, image_uri: str, build_uris: dict[str, str] | None = None, deployed_at: str = ""
) -> dict[str, str]:
    """Every function's environment: the settings record's variables (functions/settings.py) for this project;
    build_uris: the other image builds' URIs in the default region (LANDFALL_TRAINER_IMAGES); deployed_at: when the
    deploy was staged (LANDFALL_DEPLOYED_AT: a refused permission is retried for a while after it, as its grants
    propagate)."""
    artifacts = dict(zip(n.job_regions, n.artifact_buckets, strict=True))
    others = ",".join(f"{build}={uri}" for build, uri in (build_uris or {}).items() if uri != image_uri)
    return {
        "GOOGLE_CLOUD_PROJECT": n.project,
        "LANDFALL_LANDING_BUCKET": n.landing_bucket,
        "LANDFALL_ALLOWED_BUCKETS": n.landing_bucket,
        "LANDFALL_DEFAULT_REGION": n.region,
        "LANDFALL_OUTPUT_BUCKET": artifacts[n.region],
        "LANDFALL_ARTIFACT_BUCKETS": ",".join(f"{r}={b}" for r, b in artifacts.items()),
        "LANDFALL_TRAINER_IMAGE": image_uri,
        **({"LANDFALL_TRAINER_IMAGES": others} if others else {}),
        "LANDFALL_TRAINING_SERVICE_ACCOUNT": n.accounts["trainer"],
        # Each team's jobs run as the team's own identity (deploy/gcp/team_access.py), where the teams file has teams.
        **(
            {"LANDFALL_TEAM_SERVICE_ACCOUNT": f"{{team}}@{n.project}.iam.gserviceaccount.com"}
            if read_teams().teams
            else {}
        ),
        "LANDFALL_CODE_BUCKET": n.code_bucket,
        **({"LANDFALL_DEPLOYED_AT": deployed_at} if deployed_at else {}),
    }


def prepare(target: Target, root: Path = REPO_ROOT) -> Prepared:
    """Stage the trainer context and every function bundle (with its environment) under .landfall/deploy/, and
    record that environment as the project's settings (.landfall/deploy/projects/<project>.env.yaml)."""
    context, digest = stage_trainer(root)
    config = load_deploy_config()
    n = names(target, config=config)
    image = trainer_image()
    tag = target.image_tag or digest
    image_uris = {r: image.uri(target.project, r, tag) for r in n.job_regions}
    build_uris = {b.name: tuple(image.as_build(uri, b) for uri in image_uris.values()) for b in image.builds}
    image_uri = image_uris[target.region]
    builds = {b.name: image.as_build(image_uri, b) for b in image.builds}
    env = function_env(n, image_uri, builds, deployed_at=format_timestamp(datetime.now(UTC)))
    bundles = {route.name: stage_function(route.name, env, root) for route in load_topology().functions}
    build_config = stage_build_config(build_uris, root)
    record_settings(target.project, env, root)
    spec = ui.check(config, target.ui_users, target.ui_actions)
    users = dashboard_users(target.ui_users, read_teams())  # the teams' members and operators open it too
    staged = ui.stage_ui(spec, n, env, users, target.ui_actions, target.image_tag, root) if spec is not None else None
    return Prepared(bundles, context, image_uri, env, image_uris, build_config, build_uris, staged)


def facts(target: Target, n: Names, config: DeployConfig) -> tuple[Fact, ...]:
    p = target.project
    number = target.project_number or "PROJECT_NUMBER"
    found = [
        Fact(
            "project_number",
            number,
            ("gcloud", "projects", "describe", p, "--format=value(projectNumber)"),
            "the project number",
        ),
        Fact(
            "sink_writer",
            f"serviceAccount:service-{number}@gcp-sa-logging.iam.gserviceaccount.com",
            (
                "gcloud",
                "logging",
                "sinks",
                "describe",
                config.log_sink,
                f"--project={p}",
                "--format=value(writerIdentity)",
            ),
            "the log sink's writer identity",
        ),
    ]
    for spec in config.functions:
        found.append(
            Fact(
                _url_fact(spec.name),
                f"https://{target.region}-{p}.cloudfunctions.net/{spec.deployed_name}",
                (
                    "gcloud",
                    "functions",
                    "describe",
                    spec.deployed_name,
                    f"--region={target.region}",
                    f"--project={p}",
                    "--format=value(url)",
                ),
                f"the URL of {spec.deployed_name}",
            )
        )
    return tuple(found)


def _url_fact(function: str) -> str:
    return f"url_{function}"


def _grant_steps(rows: Sequence[tuple[str, Arg, str, Resource]], n: Names, section: str) -> list[Step]:
    steps = []
    for holder, member, role, resource in rows:
        steps.append(
            Step(
                f"grant {holder} {role} on {resource.kind} {resource.name}",
                iam.bind(resource, member, role, n),
                section,
                remedy="You need permission to set IAM policy on it (e.g. roles/resourcemanager."
                "projectIamAdmin for the project, roles/pubsub.admin, roles/storage.admin).",
            )
        )
    return steps


def _exists_step(
    name: str, command: Argv, section: str, probe: Argv, if_found: Argv | None = None, remedy: str = ""
) -> Step:
    return Step(name, command, section, probe=probe, if_found=if_found, remedy=remedy)


def deploy_plan(target: Target, prepared: Prepared) -> Plan:
    """Every step that stands Landfall up in target, in an order where nothing is named before it exists."""
    topology, config = load_topology(), load_deploy_config()
    n = names(target, topology, config)
    p, r = target.project, target.region
    proj = f"--project={p}"
    steps: list[Step] = []
    dashboard = ui.check(config, target.ui_users, target.ui_actions)
    idle = ui.idle_accounts(config, target.ui_users)

    section = "APIs"
    steps.append(
        Step(
            "enable the APIs Landfall uses",
            ("gcloud", "services", "enable", *config.apis, proj),
            section,
            remedy="Enabling APIs needs roles/serviceusage.serviceUsageAdmin and a billing account.",
        )
    )

    section = "Firestore (native mode) and the composite indexes the CLI's queries need"
    steps.append(
        _exists_step(
            f"create the Firestore database {DATABASE} in {r}",
            (
                "gcloud",
                "firestore",
                "databases",
                "create",
                f"--database={DATABASE}",
                f"--location={r}",
                "--type=firestore-native",
                proj,
            ),
            section,
            probe=("gcloud", "firestore", "databases", "describe", f"--database={DATABASE}", proj),
            remedy="A project has one (default) database; if it exists in Datastore mode, Landfall cannot use it.",
        )
    )
    listing = ("gcloud", "firestore", "indexes", "composite", "list", f"--database={DATABASE}", "--format=json", proj)
    for index in load_indexes(REPO_ROOT / config.firestore_indexes):
        fields = ", ".join(f"{f} {o.lower()}" for f, o in index.fields)
        steps.append(
            Step(
                f"create the composite index on {index.collection_group} ({fields})",
                (
                    "gcloud",
                    "firestore",
                    "indexes",
                    "composite",
                    "create",
                    f"--collection-group={index.collection_group}",
                    f"--query-scope={index.query_scope.lower().replace('_', '-')}",
                    *index.field_configs(),
                    f"--database={DATABASE}",
                    "--async",
                    proj,
                ),
                section,
                probe=listing,
                found=partial(_index_listed, index=index),
            )
        )

    section = "Service accounts: one per function, one for training jobs, one that invokes the functions"
    for account in (a for a in config.service_accounts if a.key not in idle):
        email = n.accounts[account.key]
        steps.append(
            _exists_step(
                f"create the service account {email}",
                (
                    "gcloud",
                    "iam",
                    "service-accounts",
                    "create",
                    account.account_id,
                    f"--display-name=Landfall {account.key}",
                    f"--description={account.about}",
                    proj,
                ),
                section,
                probe=("gcloud", "iam", "service-accounts", "describe", email, proj),
            )
        )

    section = "Buckets: landing, teams' code, and artifacts in each job region (uniform access, no public access)"
    buckets = [(n.landing_bucket, r), (n.code_bucket, r), *zip(n.artifact_buckets, target.regions(config), strict=True)]
    for bucket, location in buckets:
        steps.append(
            _exists_step(
                f"create the bucket gs://{bucket} in {location}",
                (
                    "gcloud",
                    "storage",
                    "buckets",
                    "create",
                    f"gs://{bucket}",
                    f"--location={location}",
                    "--uniform-bucket-level-access",
                    "--public-access-prevention",
                    proj,
                ),
                section,
                probe=("gcloud", "storage", "buckets", "describe", f"gs://{bucket}", proj, "--format=value(name)"),
                if_found=(
                    "gcloud",
                    "storage",
                    "buckets",
                    "update",
                    f"gs://{bucket}",
                    "--uniform-bucket-level-access",
                    "--public-access-prevention",
                    proj,
                ),
                remedy="Bucket names are global: if another project holds this one, set other names in "
                "deploy/topology.toml [gcp] landing_bucket / code_bucket / artifacts_bucket.",
            )
        )
    steps.append(
        Step(
            "make sure the Cloud Storage service agent exists (it publishes the bucket's notifications)",
            ("gcloud", "storage", "service-agent", proj),
            section,
        )
    )

    section = "Pub/Sub: the TrainingRequest schema, topics, dead-letter topics and their hold subscriptions"
    schema_id = topology.requests_schema_id
    steps.append(
        _exists_step(
            f"create the Protocol Buffer schema {schema_id} (python -m schemas.proto writes it)",
            (
                "gcloud",
                "pubsub",
                "schemas",
                "create",
                schema_id,
                "--type=protocol-buffer",
                f"--definition-file={topology.requests_schema_file}",
                proj,
            ),
            section,
            probe=("gcloud", "pubsub", "schemas", "describe", schema_id, proj),
            remedy="Schemas are immutable: to change it, give it a new schema_id in deploy/topology.toml [topics].",
        )
    )
    for topic in topology.topics:
        schema: tuple[str, ...] = ()
        if topic == topology.requests_topic:
            schema = (f"--schema={schema_id}", "--message-encoding=json")
        steps.append(
            _exists_step(
                f"create the topic {topic}",
                ("gcloud", "pubsub", "topics", "create", topic, *schema, proj),
                section,
                probe=("gcloud", "pubsub", "topics", "describe", topic, proj),
                if_found=("gcloud", "pubsub", "topics", "update", topic, *schema, proj) if schema else None,
            )
        )
    teams = [t for t in read_teams().teams if t.requests_topic]  # deploy/teams.toml, as the bundles ship it
    for team in teams:  # each team's own requests topic: Pub/Sub IAM on it decides who may publish for the team
        schema = (f"--schema={schema_id}", "--message-encoding=json")
        steps.append(
            _exists_step(
                f"create team {team.name}'s requests topic {team.requests_topic}",
                ("gcloud", "pubsub", "topics", "create", team.requests_topic, *schema, proj),
                section,
                probe=("gcloud", "pubsub", "topics", "describe", team.requests_topic, proj),
                if_found=("gcloud", "pubsub", "topics", "update", team.requests_topic, *schema, proj),
                remedy=f"Grant roles/pubsub.publisher on {team.requests_topic} to who may publish for {team.name}.",
            )
        )
    for dead in dict.fromkeys(delivery_policy(route.name).dead_letter_topic for route in topology.functions):
        if dead not in topology.topics:
            steps.append(
                _exists_step(
                    f"create the dead-letter topic {dead}",
                    ("gcloud", "pubsub", "topics", "create", dead, proj),
                    section,
                    probe=("gcloud", "pubsub", "topics", "describe", dead, proj),
                )
            )
    hold_name, dead = topology.dead_letter_subscription, topology.dead_letter_topic
    hold = (f"--message-retention-duration={config.dead_letter_retention}", "--ack-deadline=60")
    steps.append(
        _exists_step(
            f"create {hold_name}, which keeps dead letters for {config.dead_letter_retention}",
            ("gcloud", "pubsub", "subscriptions", "create", hold_name, f"--topic={dead}", *hold, proj),
            section,
            probe=("gcloud", "pubsub", "subscriptions", "describe", hold_name, proj),
            if_found=("gcloud", "pubsub", "subscriptions", "update", hold_name, *hold, proj),
        )
    )

    steps += _grant_steps(
        [
            *(r for r in iam.grants_on(BEFORE_FUNCTIONS, config, n) if not _sink_writer(r[1]) and r[0] not in idle),
            *ui.action_grants(BEFORE_FUNCTIONS, config, n, target.ui_actions),
        ],
        n,
        "Grants on the project, buckets, topics and accounts (the sink's writer comes later)",
    )
    steps += account_steps(
        read_teams(),
        n,
        topology.runs_prefix,
        submitters(config),
        "The teams' trainer identities: each team's jobs read its data and code and write its runs' folders only",
    )
    steps += member_steps(
        read_teams(),
        n,
        "The teams' members: object create under the team's prefixes and code folder, publish on its topic",
    )

    section = "The trainer images: one per CUDA line, built by Cloud Build, pushed to a repository in every job region"
    image = trainer_image()
    builder = n.accounts[config.build_account]
    build_identity = f"projects/{p}/serviceAccounts/{builder}"
    for region in n.job_regions:
        steps.append(
            _exists_step(
                f"create the Docker repository {image.repository} in {region}",
                (
                    "gcloud",
                    "artifacts",
                    "repositories",
                    "create",
                    image.repository,
                    "--repository-format=docker",
                    f"--location={region}",
                    "--description=Landfall trainer images",
                    proj,
                ),
                section,
                probe=(
                    "gcloud",
                    "artifacts",
                    "repositories",
                    "describe",
                    image.repository,
                    f"--location={region}",
                    proj,
                ),
            )
        )
    every = [
        uri for uris in (prepared.build_uris or {"": tuple(prepared.image_uris.values())}).values() for uri in uris
    ]
    builds = ", ".join(
        f"{b.describe()} for {', '.join(sm_name(c) for c in b.compute_capabilities)}" for b in image.builds
    )
    image_probes = tuple(("gcloud", "artifacts", "docker", "images", "describe", uri, proj) for uri in every)
    steps.append(
        Step(
            f"build the trainer images ({builds}; Google's Reduction Server plugin in each) and push "
            f"{', '.join(every)} (the tag is the hash of the staged context: unchanged code is not rebuilt)",
            (
                "gcloud",
                "builds",
                "submit",
                str(prepared.trainer_context),
                f"--config={prepared.build_config}",
                f"--service-account={build_identity}",
                f"--timeout={config.build_timeout}",
                f"--region={r}",
                proj,
            ),
            section,
            probe=image_probes[0],
            also_probe=image_probes[1:],
            remedy="Read the build log it names; a base image whose Python or torch differs fails its version check.",
        )
    )

    section = "Functions: HTTP functions that only the invoker account may call"
    for route in topology.functions:
        spec = config.function(route.name)
        bundle = prepared.bundles[route.name]
        steps.append(
            Step(
                f"deploy {spec.deployed_name} (entry point {route.name}) from {bundle.source}",
                (
                    "gcloud",
                    "functions",
                    "deploy",
                    spec.deployed_name,
                    "--gen2",
                    f"--region={r}",
                    f"--runtime={config.runtime}",
                    f"--source={bundle.source}",
                    f"--entry-point={route.name}",
                    "--trigger-http",
                    "--no-allow-unauthenticated",
                    f"--service-account={n.accounts[spec.service_account]}",
                    f"--build-service-account={build_identity}",
                    f"--memory={spec.memory}",
                    f"--cpu={spec.cpu}",
                    f"--timeout={route.ack_deadline_seconds}s",
                    f"--min-instances={spec.min_instances}",
                    f"--max-instances={spec.max_instances}",
                    f"--concurrency={spec.concurrency}",
                    f"--env-vars-file={bundle.env_file}",
                    proj,
                ),
                section,
                remedy="The build log is in Cloud Build; the function's own log is in Cloud Logging.",
            )
        )
    steps += _grant_steps(iam.grants_on(frozenset({"function"}), config, n), n, section)

    section = "Push subscriptions: authenticated, with a dead-letter topic, delivery attempts and back-off"
    invoker = n.accounts["invoker"]
    for route in topology.functions:
        policy = delivery_policy(route.name)
        settings = (
            Later(f"--push-endpoint={{{_url_fact(route.name)}}}"),
            f"--push-auth-service-account={invoker}",
            f"--ack-deadline={route.ack_deadline_seconds}",
            f"--dead-letter-topic={policy.dead_letter_topic}",
            f"--max-delivery-attempts={policy.max_delivery_attempts}",
            f"--min-retry-delay={policy.min_backoff_seconds}s",
            f"--max-retry-delay={policy.max_backoff_seconds}s",
            proj,
        )
        steps.append(
            _exists_step(
                f"create the subscription {route.subscription} pushing {route.topic} to {route.name}",
                (
                    "gcloud",
                    "pubsub",
                    "subscriptions",
                    "create",
                    route.subscription,
                    f"--topic={route.topic}",
                    *settings,
                ),
                section,
                probe=("gcloud", "pubsub", "subscriptions", "describe", route.subscription, proj),
                if_found=("gcloud", "pubsub", "subscriptions", "update", route.subscription, *settings),
            )
        )
        for team in teams if route.topic == topology.requests_topic else ():
            # Pushed to the function's path /projects/P/topics/T: functions-framework makes it the event's source,
            # by which the dispatcher knows the team (docs/teams.md).
            sub, path = team.requests_subscription, f"projects/{p}/topics/{team.requests_topic}"
            own = (Later(f"--push-endpoint={{{_url_fact(route.name)}}}/{path}"), *settings[1:])
            steps.append(
                _exists_step(
                    f"create the subscription {sub} pushing team {team.name}'s {team.requests_topic} to {route.name}",
                    ("gcloud", "pubsub", "subscriptions", "create", sub, f"--topic={team.requests_topic}", *own),
                    section,
                    probe=("gcloud", "pubsub", "subscriptions", "describe", sub, proj),
                    if_found=("gcloud", "pubsub", "subscriptions", "update", sub, *own),
                )
            )
    steps += _grant_steps(iam.grants_on(frozenset({"subscription"}), config, n), n, section)

    section = "Bucket notification: OBJECT_FINALIZE of the routed prefixes to the object-events topic"
    topic_path = f"projects/{p}/topics/{topology.notification_topic}"
    for prefix in routed_prefixes(n.landing_bucket):
        by_prefix = (f"--object-prefix={prefix}",) if prefix else ()
        steps.append(
            Step(
                f"notify {topology.notification_topic} of objects finalized under gs://{n.landing_bucket}/{prefix}",
                (
                    "gcloud",
                    "storage",
                    "buckets",
                    "notifications",
                    "create",
                    f"gs://{n.landing_bucket}",
                    f"--topic={topic_path}",
                    "--event-types=OBJECT_FINALIZE",
                    "--payload-format=json",
                    *by_prefix,
                    "--skip-topic-setup",
                    proj,
                ),
                section,
                probe=(
                    "gcloud",
                    "storage",
                    "buckets",
                    "notifications",
                    "list",
                    f"gs://{n.landing_bucket}",
                    "--format=json",
                    proj,
                ),
                found=partial(_has_notification, topic_path=topic_path, prefix=prefix),
            )
        )

    section = "Job events: the Cloud Logging sink carrying Vertex job log entries to the job-events topic"
    destination = f"pubsub.googleapis.com/projects/{p}/topics/{topology.job_events_topic}"
    sink_filter = f"--log-filter={job_events_log_filter()}"
    listener = topology.fed_by(topology.job_events_topic).name
    steps.append(
        _exists_step(
            f"create the log sink {config.log_sink}",
            (
                "gcloud",
                "logging",
                "sinks",
                "create",
                config.log_sink,
                destination,
                sink_filter,
                f"--description=Vertex AI job log entries for the Landfall {listener} function",
                proj,
            ),
            section,
            probe=("gcloud", "logging", "sinks", "describe", config.log_sink, proj),
            if_found=("gcloud", "logging", "sinks", "update", config.log_sink, destination, sink_filter, proj),
        )
    )
    steps += _grant_steps(
        [row for row in iam.grants_on(frozenset({"topic"}), config, n) if _sink_writer(row[1])], n, section
    )

    section = "Schedules: Cloud Scheduler publishes each tick"
    for schedule in topology.schedules:
        job = scheduler_job(schedule.name)
        body = json.dumps({"schedule": schedule.name}, separators=(",", ":"))
        # The topic by its full name: scheduler does not apply --project to it.
        target_args = (
            f"--schedule={schedule.cron}",
            f"--topic=projects/{p}/topics/{schedule.topic}",
            f"--message-body={body}",
        )
        steps.append(
            _exists_step(
                f"create the scheduler job {job} ({schedule.cron}) publishing to {schedule.topic}",
                (
                    "gcloud",
                    "scheduler",
                    "jobs",
                    "create",
                    "pubsub",
                    job,
                    f"--location={r}",
                    *target_args,
                    f"--attributes=schedule={schedule.name}",
                    "--time-zone=Etc/UTC",
                    proj,
                ),
                section,
                probe=("gcloud", "scheduler", "jobs", "describe", job, f"--location={r}", proj),
                if_found=(
                    "gcloud",
                    "scheduler",
                    "jobs",
                    "update",
                    "pubsub",
                    job,
                    f"--location={r}",
                    *target_args,
                    f"--update-attributes=schedule={schedule.name}",
                    proj,
                ),
            )
        )

    if dashboard is not None:
        if prepared.ui is None:
            raise ValueError("the dashboard is to be deployed but was not staged: prepare() the same target")
        steps += ui.deploy_steps(dashboard, prepared.ui, config, n, dashboard_users(target.ui_users, read_teams()))

    return Plan(
        title=f"landfall deploy --project={p} --region={r}: what runs on an empty project, in order.",
        steps=tuple(steps),
        facts=facts(target, n, config),
        preamble=(
            "Run from the repository root: --source, --env-vars-file and --definition-file name staged files.",
            "`landfall deploy` describes each resource first and updates it, or leaves it alone, when it exists;",
            "so a second run converges. Grants (add-iam-policy-binding) are idempotent as they are.",
            *(() if dashboard is not None else ("", ui.not_deployed(config))),
        ),
    )


def _index_listed(stdout: str, index: CompositeIndex) -> bool:
    return any(index.matches(listed) for listed in listed_indexes(stdout))


def _sink_writer(member: object) -> bool:
    return isinstance(member, Later) and "sink_writer" in member.facts


def scheduler_job(schedule: str) -> str:
    return "landfall-" + schedule.replace("_", "-")


def routed_prefixes(bucket: str) -> tuple[str, ...]:
    """The prefixes of deploy/routes.toml whose bucket glob matches the landing bucket (one notification each).

    The shipped file, named explicitly: it is what the bundles carry, and deploying reads no function settings.
    """
    from deploy.routes import read_routes

    prefixes = [route.prefix for route in read_routes() if fnmatch.fnmatchcase(bucket, route.bucket)]
    if "" in prefixes:
        return ("",)
    return tuple(dict.fromkeys(p for p in prefixes if not any(p != q and p.startswith(q) for q in prefixes)))


def _has_notification(stdout: str, topic_path: str, prefix: str) -> bool:
    try:
        listed = json.loads(stdout or "[]")
    except json.JSONDecodeError:
        return False
    for entry in listed if isinstance(listed, list) else []:
        config = entry.get("Notification Configuration", entry) if isinstance(entry, dict) else {}
        topic = str(config.get("topic", ""))
        listed_prefix = config.get("object_name_prefix", config.get("objectNamePrefix")) or ""
        if topic.endswith(topic_path) and listed_prefix == prefix:
            return True
    return False
