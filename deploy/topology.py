"""Loads deploy/topology.toml into frozen records: the one description of topics, subscriptions and functions."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from urllib.parse import quote


def _data_file(name: str) -> Path:
    """deploy/NAME, found through importlib.resources: deploy/ is a package on disk wherever it runs (a checkout, a
    function's source, the trainer image), so this is a Path, which the loaders below can cache on."""
    found = resources.files("deploy").joinpath(name)
    if not isinstance(found, Path):
        raise TypeError(f"deploy/{name}: expected a file on disk, found {found!r}")
    return found


TOPOLOGY_FILE = _data_file("topology.toml")
"""Package data of deploy/ (pyproject's package-data ships it with the functions' source)."""


class TopologyError(ValueError):
    """deploy/topology.toml is missing a value or holds a wrong one."""


ACK_DEADLINE_RANGE = (10, 600)
BACKOFF_RANGE = (0, 600)
MAX_DELIVERY_ATTEMPTS_RANGE = (5, 100)
"""Pub/Sub's limits on a subscription's ack deadline, retry back-off and dead-letter attempts (seconds, count)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How soon Pub/Sub redelivers a message whose delivery failed (a subscription's retry_policy)."""

    minimum_backoff_seconds: int
    """Delay before the first redelivery; each further failure doubles it."""
    maximum_backoff_seconds: int
    """The delay never grows past this."""


@dataclass(frozen=True)
class DeadLetterPolicy:
    """Where a message goes once it has failed too often (a subscription's dead_letter_policy)."""

    topic: str
    max_delivery_attempts: int
    """Deliveries (the first one included) after which the message is published to `topic` and acknowledged."""


@dataclass(frozen=True)
class FunctionRoute:
    """One Cloud Function and the push subscription that feeds it."""

    name: str
    topic: str
    subscription: str
    ack_deadline_seconds: int
    retry: RetryPolicy
    dead_letter: DeadLetterPolicy


@dataclass(frozen=True)
class Schedule:
    """A periodic tick (Cloud Scheduler -> Pub/Sub) that drives a sweep function."""

    name: str
    topic: str
    every_seconds: int
    cron: str


@dataclass(frozen=True)
class Topology:
    project_id: str
    default_region: str
    bucket: str
    code_bucket: str
    dataset_prefix: str
    runs_prefix: str
    notification_topic: str
    runs_collection: str
    datasets_collection: str
    dataset_versions_collection: str
    orphans_collection: str
    rate_limits_collection: str
    """One document per (Vertex AI call, region): the submission rate limiter's buckets."""
    reconciler_collection: str
    """One document per reconciler shard: the watermarks of its passes (schemas/reconcile_watermark.py)."""
    measurements_collection: str
    """One document per (workload, machine shape, image): what runs measured (schemas/measurement.py)."""
    capacity_events_collection: str
    """One document per ended job or refused call: what capacity it met (schemas/capacity_event.py)."""
    teams_collection: str
    model_promotions_collection: str
    """One document per registry model: the lease of its promotion decisions (schemas/promotion_lease.py)."""
    """One document per team: its ledger of GPUs in flight and the month's spend (schemas/team_ledger.py)."""
    vertex_create_per_minute: int
    """vertex.rate_limits.create_custom_job_per_minute: the default of LANDFALL_VERTEX_CREATE_PER_MINUTE."""
    object_events_topic: str
    requests_topic: str
    requests_schema_id: str
    requests_schema_file: str
    job_events_topic: str
    ingest_sweep_topic: str
    dead_letter_topic: str
    dead_letter_subscription: str
    reconcile_topic: str
    run_results_topic: str
    """A pull subscription on the dead-letter topic that holds dead letters for inspection."""
    functions: tuple[FunctionRoute, ...]
    schedules: tuple[Schedule, ...]
    local_ports: dict[str, int]

    def function(self, name: str) -> FunctionRoute:
        for route in self.functions:
            if route.name == name:
                return route
        raise TopologyError(f"no function {name!r} in topology; known: {[f.name for f in self.functions]}")

    def fed_by(self, topic: str) -> FunctionRoute:
        """The function the topic feeds (its subscription pushes to it)."""
        for route in self.functions:
            if route.topic == topic:
                return route
        raise TopologyError(f"no function is fed by topic {topic!r}; known: {[f.topic for f in self.functions]}")

    @property
    def topics(self) -> tuple[str, ...]:
        return (
            self.object_events_topic,
            self.requests_topic,
            self.job_events_topic,
            self.ingest_sweep_topic,
            self.dead_letter_topic,
            self.reconcile_topic,
            self.run_results_topic,
        )

    def schedule(self, name: str) -> Schedule:
        for schedule in self.schedules:
            if schedule.name == name:
                return schedule
        raise TopologyError(f"no schedule {name!r} in topology; known: {[s.name for s in self.schedules]}")


@cache
def topology_table(path: Path = TOPOLOGY_FILE) -> dict[str, object]:
    """The topology file as parsed TOML, read once per path: the topology and the trainer image (deploy/images.py)
    both come from it, and a function instance's settings need both at cold start. Treat it as read-only."""
    return tomllib.loads(path.read_text())


@cache
def load_topology(path: Path = TOPOLOGY_FILE) -> Topology:
    """Parse and check the topology file; every missing key is reported by its dotted name."""
    raw = topology_table(path)

    def get(*keys: str) -> object:
        node: object = raw
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                raise TopologyError(f"{path.name}: missing `{'.'.join(keys)}`")
            node = node[key]
        return node

    def table(*keys: str) -> dict[str, object]:
        node = get(*keys)
        if not isinstance(node, dict):
            raise TopologyError(f"{path.name}: `{'.'.join(keys)}` must be a table, got {node!r}")
        return node

    def integer(*keys: str) -> int:
        value = get(*keys)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TopologyError(f"{path.name}: `{'.'.join(keys)}` must be a whole number, got {value!r}")
        return value

    def whole(*keys: str, within: tuple[int, int]) -> int:
        value = get(*keys)
        low, high = within
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise TopologyError(
                f"{path.name}: `{'.'.join(keys)}` must be a whole number from {low} to {high}, got {value!r}"
            )
        return value

    functions = tuple(
        FunctionRoute(
            name=name,
            topic=str(get("functions", name, "topic")),
            subscription=str(get("functions", name, "subscription")),
            ack_deadline_seconds=whole("functions", name, "ack_deadline_seconds", within=ACK_DEADLINE_RANGE),
            retry=RetryPolicy(
                minimum_backoff_seconds=whole(
                    "functions", name, "retry", "minimum_backoff_seconds", within=BACKOFF_RANGE
                ),
                maximum_backoff_seconds=whole(
                    "functions", name, "retry", "maximum_backoff_seconds", within=BACKOFF_RANGE
                ),
            ),
            dead_letter=DeadLetterPolicy(
                topic=str(get("functions", name, "dead_letter", "topic")),
                max_delivery_attempts=whole(
                    "functions", name, "dead_letter", "max_delivery_attempts", within=MAX_DELIVERY_ATTEMPTS_RANGE
                ),
            ),
        )
        for name in table("functions")
    )
    schedules = tuple(
        Schedule(
            name=name,
            topic=str(get("schedules", name, "topic")),
            every_seconds=integer("schedules", name, "every_seconds"),
            cron=str(get("schedules", name, "cron")),
        )
        for name in table("schedules")
    )
    topology = Topology(
        project_id=str(get("project", "local_id")),
        default_region=str(get("project", "default_region")),
        bucket=str(get("bucket", "name")),
        code_bucket=str(get("bucket", "code_name")),
        dataset_prefix=str(get("bucket", "dataset_prefix")),
        runs_prefix=str(get("bucket", "runs_prefix")),
        notification_topic=str(get("bucket", "notification", "topic")),
        runs_collection=str(get("firestore", "runs_collection")),
        datasets_collection=str(get("firestore", "datasets_collection")),
        dataset_versions_collection=str(get("firestore", "dataset_versions_collection")),
        orphans_collection=str(get("firestore", "orphans_collection")),
        rate_limits_collection=str(get("firestore", "rate_limits_collection")),
        reconciler_collection=str(get("firestore", "reconciler_collection")),
        measurements_collection=str(get("firestore", "measurements_collection")),
        capacity_events_collection=str(get("firestore", "capacity_events_collection")),
        teams_collection=str(get("firestore", "teams_collection")),
        model_promotions_collection=str(get("firestore", "model_promotions_collection")),
        vertex_create_per_minute=whole("vertex", "rate_limits", "create_custom_job_per_minute", within=(1, 100_000)),
        object_events_topic=str(get("topics", "object_events", "name")),
        requests_topic=str(get("topics", "training_requests", "name")),
        requests_schema_id=str(get("topics", "training_requests", "schema_id")),
        requests_schema_file=str(get("topics", "training_requests", "schema_file")),
        job_events_topic=str(get("topics", "job_events", "name")),
        ingest_sweep_topic=str(get("topics", "ingest_sweep", "name")),
        dead_letter_topic=str(get("topics", "dead_letter", "name")),
        dead_letter_subscription=str(get("topics", "dead_letter", "subscription")),
        reconcile_topic=str(get("topics", "reconcile", "name")),
        run_results_topic=str(get("topics", "run_results", "name")),
        functions=functions,
        schedules=schedules,
        local_ports={name: integer("local", "ports", name) for name in table("local", "ports")},
    )
    for route in functions:
        if route.topic not in topology.topics:
            raise TopologyError(f"{path.name}: function {route.name} listens on unknown topic {route.topic!r}")
        if route.retry.minimum_backoff_seconds > route.retry.maximum_backoff_seconds:
            raise TopologyError(
                f"{path.name}: functions.{route.name}.retry: minimum_backoff_seconds "
                f"({route.retry.minimum_backoff_seconds}) exceeds maximum_backoff_seconds "
                f"({route.retry.maximum_backoff_seconds})"
            )
        if route.dead_letter.topic != topology.dead_letter_topic:
            raise TopologyError(
                f"{path.name}: functions.{route.name}.dead_letter.topic is "
                f"{route.dead_letter.topic!r}; dead letters go to topics.dead_letter.name "
                f"({topology.dead_letter_topic!r})"
            )
    for schedule in schedules:
        if schedule.topic not in topology.topics:
            raise TopologyError(f"{path.name}: schedule {schedule.name} publishes to unknown topic {schedule.topic!r}")
        if schedule.every_seconds < 1:
            raise TopologyError(f"{path.name}: schedules.{schedule.name}.every_seconds must be >= 1")
    if topology.notification_topic != topology.object_events_topic:
        raise TopologyError(f"{path.name}: bucket.notification.topic must be topics.object_events.name")
    return topology


PRINCIPAL_METADATA = "x-landfall-principal"
"""On the local stack, the gRPC metadata naming who calls the Vertex emulator (an endpoint ending /as/MEMBER sends it),
as a call's credentials name the caller to Vertex AI."""
PUBSUB_GATE_ENV = "LANDFALL_PUBSUB_GATE"
"""On the local stack, its Pub/Sub gate (HOST:PORT, deploy/local_iam/pubsub_gate.py): what a process acting as someone
publishes through (the functions; the CLI run as LANDFALL_IDENTITY, landfall/access.py)."""
PRINCIPAL_PATH = "/as/"
"""On the local stack, a Cloud Storage endpoint ending /as/MEMBER calls as MEMBER (deploy/local_iam/storage_gate.py)."""


def storage_as(base: str, member: str) -> str:
    """The STORAGE_EMULATOR_HOST (or LANDFALL_VERTEX_ENDPOINT) of a process acting as member (`serviceAccount:EMAIL`)
    on the local stack's storage gate (or Vertex emulator) at base; base itself is the project owner's."""
    return f"{base.rstrip('/')}{PRINCIPAL_PATH}{quote(member, safe=':@')}"


def account_email(key: str, project: str, path: Path = TOPOLOGY_FILE) -> str:
    """The email of the deployment's service account `key` ([gcp.service_accounts.KEY]) in project."""
    accounts = _section(topology_table(path), "gcp", "service_accounts")
    return f"{_section(accounts, key)['account_id']}@{project}.iam.gserviceaccount.com"


def artifacts_bucket(project: str, region: str, path: Path = TOPOLOGY_FILE) -> str:
    """The artifacts bucket of region in project ([gcp] artifacts_bucket): where a job in that region writes."""
    return str(_section(topology_table(path), "gcp")["artifacts_bucket"]).format(project=project, region=region)


def function_account(function: str, path: Path = TOPOLOGY_FILE) -> str:
    """The [gcp.service_accounts] key function `function` runs as ([gcp.functions.NAME] service_account)."""
    return str(_section(topology_table(path), "gcp", "functions", function)["service_account"])


def _section(table: object, *keys: str) -> dict[str, object]:
    for key in keys:
        if not isinstance(table, dict) or not isinstance(table.get(key), dict):
            raise TopologyError(f"{'.'.join(keys)} is missing from the topology")
        table = table[key]
    assert isinstance(table, dict)
    return table
