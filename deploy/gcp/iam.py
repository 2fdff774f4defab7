"""IAM grants as gcloud commands, each on the narrowest resource its `on` names.

A grant names a kind of resource and, for some kinds, which one (config.Grant). `targets` resolves it to the
concrete resources of this deployment; `bind` renders the add (deploy) or remove (teardown) command for one of
them. add-iam-policy-binding is idempotent, so grants need no describe step.
"""

from __future__ import annotations

from dataclasses import dataclass

from deploy.gcp.config import DeployConfig, Grant, delivery_policy, topic_names
from deploy.gcp.steps import Arg, Argv, Later
from deploy.topology import Topology


@dataclass(frozen=True)
class Resource:
    """A concrete resource a role is granted on. kind: project | bucket | topic | subscription | service_account |
    function; name: its id (bucket name, topic id, account email, deployed function name)."""

    kind: str
    name: str
    condition: str = ""
    """For a project or a bucket: the --condition value narrowing the grant (a project's "" is the plain binding,
    --condition=None; a bucket's "" passes no --condition)."""


DATABASE = "(default)"
"""Landfall's Firestore database: the one a project's clients use unless told otherwise."""


@dataclass(frozen=True)
class Names:
    """The concrete names of one deployment, which grants resolve against."""

    project: str
    region: str
    landing_bucket: str
    job_regions: tuple[str, ...]
    artifact_buckets: tuple[str, ...]
    """One per job region, in the same order."""
    code_bucket: str
    topics: dict[str, str]
    """[topics] key -> topic id."""
    dead_letter_topics: tuple[str, ...]
    subscriptions: tuple[str, ...]
    accounts: dict[str, str]
    """[gcp.service_accounts] key -> email."""
    functions: dict[str, str]
    """[functions] key -> deployed name."""


def targets(grant: Grant, names: Names) -> tuple[Resource, ...]:
    kind, target = grant.kind, grant.target
    if kind == "project":
        return (Resource("project", names.project),)
    if kind == "bucket":
        buckets = {"landing": (names.landing_bucket,), "code": (names.code_bucket,)}.get(target, names.artifact_buckets)
        return tuple(Resource("bucket", b) for b in buckets)
    if kind == "topic":
        return (Resource("topic", names.topics[target]),)
    if kind == "dead_letter_topics":
        return tuple(Resource("topic", t) for t in names.dead_letter_topics)
    if kind == "subscriptions":
        return tuple(Resource("subscription", s) for s in names.subscriptions)
    if kind == "service_account":
        return (Resource("service_account", names.accounts[target]),)
    if kind == "function":
        return (Resource("function", names.functions[target]),)
    if kind == "functions":
        return tuple(Resource("function", f) for f in names.functions.values())
    raise ValueError(f"unknown grant target kind {kind!r}")


def bind(resource: Resource, member: Arg, role: str, names: Names, remove: bool = False) -> Argv:
    """The gcloud command adding (or removing) member's role on resource."""
    verb = "remove-iam-policy-binding" if remove else "add-iam-policy-binding"
    who: Arg = Later(f"--member={member.template}") if isinstance(member, Later) else f"--member={member}"
    project = f"--project={names.project}"
    if resource.kind == "project":
        # --condition=None: add the plain binding even where the policy already holds conditional ones.
        condition = f"--condition={resource.condition or 'None'}"
        return ("gcloud", "projects", verb, resource.name, who, f"--role={role}", condition)
    if resource.kind == "bucket":
        bucket = ("gcloud", "storage", "buckets", verb, f"gs://{resource.name}", who, f"--role={role}", project)
        return (*bucket, f"--condition={resource.condition}") if resource.condition else bucket
    if resource.kind == "topic":
        return ("gcloud", "pubsub", "topics", verb, resource.name, who, f"--role={role}", project)
    if resource.kind == "subscription":
        return ("gcloud", "pubsub", "subscriptions", verb, resource.name, who, f"--role={role}", project)
    if resource.kind == "service_account":
        return ("gcloud", "iam", "service-accounts", verb, resource.name, who, f"--role={role}", project)
    if resource.kind == "function":
        if role != "roles/run.invoker":
            raise ValueError(f"a function takes only roles/run.invoker, not {role}")
        verb = "remove-invoker-policy-binding" if remove else "add-invoker-policy-binding"
        return ("gcloud", "functions", verb, resource.name, f"--region={names.region}", who, project)
    raise ValueError(f"unknown resource kind {resource.kind!r}")


def account_member(email: str) -> str:
    return f"serviceAccount:{email}"


def grants_on(kinds: frozenset[str], config: DeployConfig, names: Names) -> list[tuple[str, Arg, str, Resource]]:
    """(holder, member, role, resource) of every grant whose resource kind is in kinds: service accounts first,
    then service agents, each in topology order."""
    rows: list[tuple[str, Arg, str, Resource]] = []
    for account in config.service_accounts:
        member: Arg = account_member(names.accounts[account.key])
        for grant in account.grants:
            rows += [(account.key, member, grant.role, r) for r in resolved(grant, config, names) if r.kind in kinds]
    for agent in config.service_agents:
        member = Later(agent.member) if "{" in agent.member else agent.member
        for grant in agent.grants:
            rows += [(agent.key, member, grant.role, r) for r in resolved(grant, config, names) if r.kind in kinds]
    return rows


def resolved(grant: Grant, config: DeployConfig, names: Names) -> tuple[Resource, ...]:
    """The concrete resources of grant, each carrying the --condition value of the grant's condition (a bucket's
    filled in with its own name)."""
    found = targets(grant, names)
    if not grant.condition:
        return found
    condition = config.condition(grant.condition)
    return tuple(
        Resource(r.kind, r.name, condition.flag(names.project, DATABASE, r.name if r.kind == "bucket" else ""))
        for r in found
    )


def names_for(
    topology: Topology, config: DeployConfig, project: str, region: str, job_regions: tuple[str, ...]
) -> Names:
    """Every name a deployment of topology in project uses; job_regions get one artifacts bucket each."""
    return Names(
        project=project,
        region=region,
        landing_bucket=config.landing_bucket.format(project=project, region=region),
        job_regions=job_regions,
        artifact_buckets=tuple(config.artifacts_bucket.format(project=project, region=r) for r in job_regions),
        code_bucket=config.code_bucket.format(project=project, region=region),
        topics=topic_names(),
        dead_letter_topics=tuple(
            dict.fromkeys(delivery_policy(route.name).dead_letter_topic for route in topology.functions)
        ),
        subscriptions=tuple(route.subscription for route in topology.functions),
        accounts={a.key: a.email(project) for a in config.service_accounts},
        functions={spec.name: spec.deployed_name for spec in config.functions},
    )
