"""Removing what `landfall deploy` made, in the reverse order: what starts traffic first, data last.

Each step describes its resource first and is skipped when it is already gone, so a teardown can be re-run. A
bucket that holds objects is kept (a Guard refuses its deletion) unless --delete-data, which also deletes the
Firestore database; the APIs stay enabled.
"""

from __future__ import annotations

import json
from functools import partial

from deploy.gcp import iam
from deploy.gcp.config import load_deploy_config
from deploy.gcp.plan import DATABASE, Target, facts, names, scheduler_job
from deploy.gcp.steps import ITEM, Argv, Guard, Plan, Step
from deploy.images import trainer_image
from deploy.teams import read_teams
from deploy.topology import load_topology

PROJECT_ONLY = frozenset({"project"})
OPEN_JOB_STATES = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING")
"""Vertex AI CustomJob states that are (or are about to be) billed: teardown cancels Landfall's jobs in them."""


def teardown_plan(target: Target) -> Plan:
    """Every step that removes what deploy_plan made, in reverse dependency order. Buckets that hold objects are
    kept unless target.delete_data; the Firestore database (run records) is deleted only then; APIs stay on."""
    topology, config = load_topology(), load_deploy_config()
    n = names(target, topology, config)
    p, r = target.project, target.region
    proj = f"--project={p}"
    steps: list[Step] = []

    def gone(name: str, command: Argv, section: str, probe: Argv) -> None:
        steps.append(
            Step(
                name, (*command, "--quiet"), section, probe=probe, if_found=(*command, "--quiet"), run_if_missing=False
            )
        )

    section = "What starts traffic: schedules, the log sink, the bucket notifications"
    for schedule in topology.schedules:
        job = scheduler_job(schedule.name)
        where = (job, f"--location={r}", proj)
        gone(
            f"delete the scheduler job {job}",
            ("gcloud", "scheduler", "jobs", "delete", *where),
            section,
            ("gcloud", "scheduler", "jobs", "describe", *where),
        )
    gone(
        f"delete the log sink {config.log_sink}",
        ("gcloud", "logging", "sinks", "delete", config.log_sink, proj),
        section,
        ("gcloud", "logging", "sinks", "describe", config.log_sink, proj),
    )
    bucket_probe = (
        "gcloud",
        "storage",
        "buckets",
        "describe",
        f"gs://{n.landing_bucket}",
        proj,
        "--format=value(name)",
    )
    gone(
        f"delete the notifications of gs://{n.landing_bucket} (a bucket Landfall made)",
        ("gcloud", "storage", "buckets", "notifications", "delete", f"gs://{n.landing_bucket}", proj),
        section,
        bucket_probe,
    )

    section = "Subscriptions and functions"
    for route in topology.functions:
        gone(
            f"delete the subscription {route.subscription}",
            ("gcloud", "pubsub", "subscriptions", "delete", route.subscription, proj),
            section,
            ("gcloud", "pubsub", "subscriptions", "describe", route.subscription, proj),
        )
    teams = [t for t in read_teams().teams if t.requests_topic]  # each team's own topic (docs/teams.md)
    for team in teams:
        gone(
            f"delete the subscription {team.requests_subscription}",
            ("gcloud", "pubsub", "subscriptions", "delete", team.requests_subscription, proj),
            section,
            ("gcloud", "pubsub", "subscriptions", "describe", team.requests_subscription, proj),
        )
    for spec in config.functions:
        where = (spec.deployed_name, f"--region={r}", proj)
        gone(
            f"delete the function {spec.deployed_name}",
            ("gcloud", "functions", "delete", *where),
            section,
            ("gcloud", "functions", "describe", *where),
        )

    section = "Vertex AI jobs still queued or running, cancelled once no function can submit another"
    for region in n.job_regions:
        in_region = (f"--region={region}", proj)
        steps.append(
            Step(
                f"cancel Landfall's jobs still queued, pending or running in {region} (they bill until they end)",
                ("gcloud", "ai", "custom-jobs", "cancel", ITEM, *in_region),
                section,
                probe=(
                    "gcloud",
                    "ai",
                    "custom-jobs",
                    "list",
                    *in_region,
                    f"--filter=labels.landfall=run AND state:({' '.join(OPEN_JOB_STATES)})",
                    "--format=value(name.basename())",
                ),
                for_each=True,
                remedy="Cancelling a job needs roles/aiplatform.user; `gcloud ai custom-jobs list --region=R` shows "
                "them. A job the teardown cannot cancel keeps billing until it ends.",
            )
        )

    section = "Pub/Sub: dead-letter holds, topics, the schema"
    for hold in (topology.dead_letter_subscription,):
        gone(
            f"delete the subscription {hold}",
            ("gcloud", "pubsub", "subscriptions", "delete", hold, proj),
            section,
            ("gcloud", "pubsub", "subscriptions", "describe", hold, proj),
        )
    for topic in dict.fromkeys((*topology.topics, *n.dead_letter_topics, *(t.requests_topic for t in teams))):
        gone(
            f"delete the topic {topic}",
            ("gcloud", "pubsub", "topics", "delete", topic, proj),
            section,
            ("gcloud", "pubsub", "topics", "describe", topic, proj),
        )
    schema_id = topology.requests_schema_id
    gone(
        f"delete the schema {schema_id}",
        ("gcloud", "pubsub", "schemas", "delete", schema_id, proj),
        section,
        ("gcloud", "pubsub", "schemas", "describe", schema_id, proj),
    )

    section = "Project-level grants, then the service accounts"
    policy = ("gcloud", "projects", "get-iam-policy", p, "--format=json")
    for holder, member, role, resource in iam.grants_on(PROJECT_ONLY, config, n):
        steps.append(
            Step(
                f"remove {holder}'s {role} on the project",
                iam.bind(resource, member, role, n, remove=True),
                section,
                probe=policy,
                found=partial(_policy_has, member=str(member), role=role, condition=resource.condition),
                if_found=iam.bind(resource, member, role, n, remove=True),
                run_if_missing=False,
            )
        )
    for account in config.service_accounts:
        email = n.accounts[account.key]
        gone(
            f"delete the service account {email}",
            ("gcloud", "iam", "service-accounts", "delete", email, proj),
            section,
            ("gcloud", "iam", "service-accounts", "describe", email, proj),
        )

    section = "The trainer images: the repository in each job region"
    repository = trainer_image().repository
    for region in n.job_regions:
        where = (repository, f"--location={region}", proj)
        gone(
            f"delete the Docker repository {repository} in {region} and its images",
            ("gcloud", "artifacts", "repositories", "delete", *where),
            section,
            ("gcloud", "artifacts", "repositories", "describe", *where),
        )

    section = (
        "Data: buckets and the Firestore database, deleted with their contents (--delete-data)"
        if target.delete_data
        else "Data: empty buckets are deleted; a bucket that holds objects is kept"
    )
    for bucket in (*n.artifact_buckets, n.code_bucket, n.landing_bucket):
        probe = ("gcloud", "storage", "buckets", "describe", f"gs://{bucket}", proj, "--format=value(name)")
        if target.delete_data:
            gone(
                f"delete gs://{bucket} and every object in it",
                ("gcloud", "storage", "rm", "--recursive", f"gs://{bucket}", proj),
                section,
                probe,
            )
            continue
        command = ("gcloud", "storage", "buckets", "delete", f"gs://{bucket}", proj, "--quiet")
        steps.append(
            Step(
                f"delete gs://{bucket} if it is empty",
                command,
                section,
                probe=probe,
                if_found=command,
                run_if_missing=False,
                guard=Guard(
                    (
                        "gcloud",
                        "storage",
                        "objects",
                        "list",
                        f"gs://{bucket}/**",
                        "--limit=1",
                        "--format=value(name)",
                        proj,
                    ),
                    refuse=lambda out: bool(out.strip()),
                    message=f"gs://{bucket} holds objects, so teardown keeps it. Copy out what you need, then "
                    "run `landfall teardown ... --delete-data` to delete it with its objects.",
                ),
            )
        )
    if target.delete_data:
        database = (f"--database={DATABASE}", proj)
        gone(
            f"delete the Firestore database {DATABASE} (run and dataset records)",
            ("gcloud", "firestore", "databases", "delete", *database),
            section,
            ("gcloud", "firestore", "databases", "describe", *database),
        )

    kept = [] if target.delete_data else ["the Firestore database (run records; --delete-data deletes it)"]
    return Plan(
        title=f"landfall teardown --project={p} --region={r}: what runs when everything exists, in order.",
        steps=tuple(steps),
        facts=facts(target, n, config),
        preamble=(
            "`landfall teardown` describes each resource first and skips what is already gone.",
            "Kept: the enabled APIs" + "".join(f", {k}" for k in kept) + ".",
        ),
    )


def _policy_has(stdout: str, member: str, role: str, condition: str = "") -> bool:
    """Whether the project's policy binds member to role, under the condition the grant carried (its expression; ""
    for the plain binding)."""
    try:
        policy = json.loads(stdout or "{}")
    except json.JSONDecodeError:
        return False
    expression = condition.partition(",title=")[0].removeprefix("expression=")
    return any(
        b.get("role") == role
        and member in b.get("members", [])
        and (b.get("condition") or {}).get("expression", "") == expression
        for b in policy.get("bindings", [])
    )
