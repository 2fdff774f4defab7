"""The Google Cloud half of deploy/topology.toml: the [gcp] tables, read into frozen records and checked.

deploy/topology.py reads what the local stack shares with Google Cloud (topics, subscriptions, functions,
schedules); this module reads only what a deployment adds. A missing or wrong value fails with its dotted name.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from deploy.topology import TOPOLOGY_FILE, Topology, load_topology

BASIC_ROLES = frozenset({"roles/owner", "roles/editor", "roles/viewer"})
"""Roles that grant everything in a project; a deployment grants none of them, anywhere."""
TARGET_KINDS = (
    "project",
    "bucket",
    "topic",
    "service_account",
    "function",
    "functions",
    "dead_letter_topics",
    "subscriptions",
)
"""What a grant's `on` may name (see the comment above [gcp.service_accounts] in topology.toml)."""
BUCKET_TARGETS = ("landing", "artifacts", "code")
_MEMORY = re.compile(r"^\d+(Mi|Gi)$")
_DURATION = re.compile(r"^\d+[smhd]$")
_T = TypeVar("_T")


class DeployConfigError(ValueError):
    """The [gcp] tables of deploy/topology.toml miss a value or hold a wrong one."""


@dataclass(frozen=True)
class Condition:
    """An IAM condition a project- or bucket-level grant carries ([gcp.conditions.*]): expression is a CEL template
    over {project}, {database} and, on a bucket, {bucket}."""

    key: str
    title: str
    description: str
    expression: str

    def flag(self, project: str, database: str, bucket: str = "") -> str:
        """The value of gcloud's --condition flag for this project (and bucket, for a bucket's grant); title and
        description name it in the policy."""
        expression = self.expression.format(project=project, database=database, bucket=bucket)
        return f"expression={expression},title={self.title},description={self.description}"


@dataclass(frozen=True)
class Grant:
    """One role on one resource. on: `project`, `bucket:landing`, `topic:job_events`, `functions`, ...
    condition: the key of a [gcp.conditions.*] table narrowing a project- or bucket-level grant ("" = none)."""

    role: str
    on: str
    condition: str = ""

    @property
    def kind(self) -> str:
        return self.on.partition(":")[0]

    @property
    def target(self) -> str:
        return self.on.partition(":")[2]


@dataclass(frozen=True)
class ServiceAccount:
    """A service account the deployment creates. key: its name in topology.toml; account_id: its IAM id."""

    key: str
    account_id: str
    about: str
    grants: tuple[Grant, ...]

    def email(self, project: str) -> str:
        return f"{self.account_id}@{project}.iam.gserviceaccount.com"


@dataclass(frozen=True)
class ServiceAgent:
    """A Google-managed identity that needs grants: member is a template ({project_number}, {sink_writer})."""

    key: str
    member: str
    about: str
    grants: tuple[Grant, ...]


@dataclass(frozen=True)
class FunctionSpec:
    """How one [functions.*] entry runs as a Cloud Run function."""

    name: str
    deployed_name: str
    service_account: str
    memory: str
    cpu: str
    min_instances: int
    max_instances: int
    concurrency: int


@dataclass(frozen=True)
class DeliveryPolicy:
    """What Pub/Sub does with a message its function did not acknowledge.

    dead_letter_topic: where it goes after max_delivery_attempts (5 to 100); min/max_backoff_seconds: the retry
    back-off between deliveries (0 to 600).
    """

    dead_letter_topic: str
    max_delivery_attempts: int
    min_backoff_seconds: int
    max_backoff_seconds: int


@dataclass(frozen=True)
class UiAction:
    """An action the dashboard may offer (LANDFALL_UI_ACTIONS): what it does, and what its account then needs."""

    name: str
    about: str
    grants: tuple[Grant, ...]


@dataclass(frozen=True)
class UiSpec:
    """How the dashboard runs as a Cloud Run service ([gcp.ui]); deploy/gcp/ui.py renders it.

    service_account: the [gcp.service_accounts.*] key it runs as (read-only grants); image_name: its image in the
    trainer's Artifact Registry repository, built from dockerfile; actions: what each LANDFALL_UI_ACTIONS entry adds.
    """

    service_name: str
    service_account: str
    image_name: str
    dockerfile: str
    memory: str
    cpu: str
    min_instances: int
    max_instances: int
    concurrency: int
    timeout: str
    actions: tuple[UiAction, ...] = ()

    def action(self, name: str) -> UiAction:
        for action in self.actions:
            if action.name == name:
                return action
        raise DeployConfigError(
            f"the dashboard has no action {name!r}; it may offer {', '.join(a.name for a in self.actions)}"
        )


@dataclass(frozen=True)
class DeployConfig:
    runtime: str
    apis: tuple[str, ...]
    landing_bucket: str
    artifacts_bucket: str
    code_bucket: str
    """Teams' scripts and packages (LANDFALL_CODE_BUCKET); {project} and {region} are filled in."""
    job_regions: tuple[str, ...]
    log_sink: str
    dead_letter_retention: str
    firestore_indexes: str
    functions: tuple[FunctionSpec, ...]
    service_accounts: tuple[ServiceAccount, ...]
    service_agents: tuple[ServiceAgent, ...]
    conditions: tuple[Condition, ...] = ()
    build_account: str = "builder"
    """The [gcp.service_accounts.*] key of the identity Cloud Build runs as (the image build and every function's)."""
    build_timeout: str = "3600s"
    """How long Cloud Build may take over the trainer image (its CUDA base alone is several GB to pull and push)."""
    ui: UiSpec | None = None
    """The dashboard's Cloud Run service ([gcp.ui]); None: the topology deploys none."""

    def condition(self, key: str) -> Condition:
        for condition in self.conditions:
            if condition.key == key:
                return condition
        raise DeployConfigError(f"no [gcp.conditions.{key}]; known: {[c.key for c in self.conditions]}")

    def function(self, name: str) -> FunctionSpec:
        for spec in self.functions:
            if spec.name == name:
                return spec
        known = [f.name for f in self.functions]
        raise DeployConfigError(f"no [gcp.functions.{name}] in topology.toml; known: {known}")

    def account(self, key: str) -> ServiceAccount:
        for account in self.service_accounts:
            if account.key == key:
                return account
        raise DeployConfigError(f"no [gcp.service_accounts.{key}]; known: {[a.key for a in self.service_accounts]}")


def delivery_policy(function: str, path: Path = TOPOLOGY_FILE) -> DeliveryPolicy:
    """The dead-letter topic, delivery attempts and retry back-off of a function's subscription.

    Read from [functions.<name>] retry and dead_letter in topology.toml through load_topology, the same values the
    local stack's delivery bridge applies (and checks against Pub/Sub's limits).
    """
    try:
        route = load_topology(path).function(function)
    except (KeyError, ValueError) as exc:
        raise DeployConfigError(f"{path.name}: no usable [functions.{function}]: {exc}") from exc
    return DeliveryPolicy(
        dead_letter_topic=route.dead_letter.topic,
        max_delivery_attempts=route.dead_letter.max_delivery_attempts,
        min_backoff_seconds=route.retry.minimum_backoff_seconds,
        max_backoff_seconds=route.retry.maximum_backoff_seconds,
    )


@cache
def _raw(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def job_events_log_filter(path: Path = TOPOLOGY_FILE) -> str:
    """[topics.job_events] log_filter: which log entries the sink carries to the job-events topic."""
    value = _raw(path).get("topics", {}).get("job_events", {}).get("log_filter")
    if not isinstance(value, str) or not value:
        raise DeployConfigError(
            f'{path.name}: topics.job_events.log_filter must be a Cloud Logging filter such as resource.type="ml_job"'
        )
    return value


def topic_names(path: Path = TOPOLOGY_FILE) -> dict[str, str]:
    """[topics] key -> topic id, e.g. {"job_events": "landfall-job-events", ...}."""
    return {key: str(table["name"]) for key, table in _raw(path).get("topics", {}).items()}


def _grants(where: str, raw: object) -> tuple[Grant, ...]:
    if not isinstance(raw, list) or not raw:
        raise DeployConfigError(f"{where}.grants must be a non-empty list of {{ role = ..., on = ... }}")
    grants = []
    for entry in raw:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("role"), str)
            or not isinstance(entry.get("on"), str)
        ):
            raise DeployConfigError(f"{where}.grants: each entry needs a role and an on, found {entry!r}")
        condition = entry.get("condition", "")
        if not isinstance(condition, str):
            raise DeployConfigError(f"{where}.grants: condition must name a [gcp.conditions.*] table, found {entry!r}")
        grant = Grant(entry["role"], entry["on"], condition)
        if grant.condition and grant.kind not in ("project", "bucket"):
            raise DeployConfigError(
                f"{where}: {grant.role} on {grant.on!r} carries condition {grant.condition!r}; only a grant "
                'on = "project" or on a bucket takes one (the other resources are granted on directly)'
            )
        if grant.role in BASIC_ROLES:
            raise DeployConfigError(
                f"{where}: {grant.role} is a basic role; grant the predefined role the account "
                "needs instead (a deployment grants no basic role anywhere)"
            )
        if not grant.role.startswith("roles/"):
            raise DeployConfigError(
                f"{where}: role {grant.role!r} must be a predefined role such as roles/pubsub.publisher"
            )
        if grant.kind not in TARGET_KINDS:
            raise DeployConfigError(
                f"{where}: on = {grant.on!r} names no known resource kind; use one of {', '.join(TARGET_KINDS)}"
            )
        grants.append(grant)
    return tuple(grants)


def _check_targets(config: DeployConfig, topology: Topology, topics: Mapping[str, Any]) -> None:
    functions = {route.name for route in topology.functions}
    accounts = {account.key for account in config.service_accounts}
    holders: list[tuple[str, tuple[Grant, ...]]] = [
        *((f"gcp.service_accounts.{a.key}", a.grants) for a in config.service_accounts),
        *((f"gcp.service_agents.{a.key}", a.grants) for a in config.service_agents),
        *((f"gcp.ui.actions.{a.name}", a.grants) for a in (config.ui.actions if config.ui else ())),
    ]
    for where, grants in holders:
        for grant in grants:
            known = {
                "bucket": BUCKET_TARGETS,
                "topic": tuple(topics),
                "service_account": tuple(accounts),
                "function": tuple(functions),
            }.get(grant.kind)
            if known is not None and grant.target not in known:
                raise DeployConfigError(
                    f"topology.toml {where}: {grant.on!r} names no {grant.kind}; known: {', '.join(sorted(known))}"
                )
    conditions = {condition.key for condition in config.conditions}
    for where, grants in holders:
        for grant in grants:
            if grant.condition and grant.condition not in conditions:
                raise DeployConfigError(
                    f"topology.toml {where}: condition {grant.condition!r} is no [gcp.conditions.*]; "
                    f"known: {', '.join(sorted(conditions))}"
                )
    for spec in config.functions:
        if spec.service_account not in accounts:
            raise DeployConfigError(
                f"topology.toml gcp.functions.{spec.name}.service_account {spec.service_account!r}"
                f" is no [gcp.service_accounts.*]; known: {', '.join(sorted(accounts))}"
            )
    if config.ui and config.ui.service_account not in accounts:
        raise DeployConfigError(
            f"topology.toml gcp.ui.service_account {config.ui.service_account!r} is no [gcp.service_accounts.*]; "
            f"known: {', '.join(sorted(accounts))}"
        )
    missing = functions - {spec.name for spec in config.functions}
    if missing:
        raise DeployConfigError(
            f"topology.toml: functions {sorted(missing)} have no [gcp.functions.*] table (memory, "
            "cpu, instances, concurrency, service account)"
        )


def _ui(table: object, file: str) -> UiSpec | None:
    """[gcp.ui], checked: None when the topology has no such table."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise DeployConfigError(f"{file}: gcp.ui must be a table (service_name, service_account, image_name, ...)")
    text = {"service_name", "service_account", "image_name", "dockerfile", "memory", "cpu", "timeout"}
    whole = {"min_instances", "max_instances", "concurrency"}
    for key in sorted(text | whole):
        value = table.get(key)
        kind: type = str if key in text else int
        if not isinstance(value, kind) or isinstance(value, bool) or value == "":
            raise DeployConfigError(f"{file}: gcp.ui.{key} must be a {kind.__name__}, found {value!r}")
    spec = UiSpec(
        **{key: table[key] for key in text | whole},
        actions=tuple(
            UiAction(
                name,
                str(action.get("about", "")) if isinstance(action, dict) else "",
                _grants(f"gcp.ui.actions.{name}", action.get("grants") if isinstance(action, dict) else None),
            )
            for name, action in (table.get("actions") or {}).items()
        ),
    )
    if not re.fullmatch(r"[a-z]([-a-z0-9]{0,47}[a-z0-9])?", spec.service_name):
        raise DeployConfigError(
            f"{file}: gcp.ui.service_name {spec.service_name!r} is not a Cloud Run service name (lowercase letters, "
            "digits and hyphens, starting with a letter, at most 49 characters)"
        )
    if not _MEMORY.match(spec.memory):
        raise DeployConfigError(f"{file}: gcp.ui.memory must look like 512Mi or 2Gi, found {spec.memory!r}")
    if not _DURATION.match(spec.timeout):
        raise DeployConfigError(f"{file}: gcp.ui.timeout must look like 300s, found {spec.timeout!r}")
    if not 0 <= spec.min_instances <= spec.max_instances or spec.max_instances < 1:
        raise DeployConfigError(
            f"{file}: gcp.ui needs 0 <= min_instances <= max_instances and max_instances >= 1, found "
            f"{spec.min_instances} and {spec.max_instances}"
        )
    for action in spec.actions:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", action.name):
            raise DeployConfigError(f"{file}: gcp.ui.actions.{action.name}: an action is a lowercase word")
    return spec


@cache
def load_deploy_config(path: Path = TOPOLOGY_FILE) -> DeployConfig:
    """Parse and check the [gcp] tables; every problem names its dotted key."""
    raw = _raw(path)
    gcp = raw.get("gcp")
    if not isinstance(gcp, dict):
        raise DeployConfigError(f"{path.name}: missing the [gcp] table that `landfall deploy` reads")

    def get(table: Mapping[str, Any], where: str, key: str, kind: type[_T]) -> _T:
        value = table.get(key)
        if isinstance(value, kind) and not isinstance(value, bool) and value != "":
            return value
        raise DeployConfigError(f"{path.name}: {where}.{key} must be a {kind.__name__}, found {value!r}")

    functions = []
    for name, table in get(gcp, "gcp", "functions", dict).items():
        where = f"gcp.functions.{name}"
        spec = FunctionSpec(
            name=name,
            deployed_name=get(table, where, "deployed_name", str),
            service_account=get(table, where, "service_account", str),
            memory=get(table, where, "memory", str),
            cpu=get(table, where, "cpu", str),
            min_instances=get(table, where, "min_instances", int),
            max_instances=get(table, where, "max_instances", int),
            concurrency=get(table, where, "concurrency", int),
        )
        if not _MEMORY.match(spec.memory):
            raise DeployConfigError(f"{path.name}: {where}.memory must look like 512Mi or 2Gi, found {spec.memory!r}")
        if not 0 <= spec.min_instances <= spec.max_instances or spec.max_instances < 1:
            raise DeployConfigError(
                f"{path.name}: {where} needs 0 <= min_instances <= max_instances and "
                f"max_instances >= 1, found {spec.min_instances} and {spec.max_instances}"
            )
        if spec.concurrency > 1 and float(spec.cpu) < 1:
            raise DeployConfigError(
                f"{path.name}: {where}: concurrency {spec.concurrency} needs cpu >= 1 (Cloud Run "
                "serves concurrent requests only with a whole CPU)"
            )
        functions.append(spec)
    accounts = tuple(
        ServiceAccount(
            key,
            get(table, f"gcp.service_accounts.{key}", "account_id", str),
            str(table.get("about", "")),
            _grants(f"gcp.service_accounts.{key}", table.get("grants")),
        )
        for key, table in get(gcp, "gcp", "service_accounts", dict).items()
    )
    for account in accounts:
        if not re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", account.account_id):
            raise DeployConfigError(
                f"{path.name}: gcp.service_accounts.{account.key}.account_id "
                f"{account.account_id!r} must be 6 to 30 lowercase letters, digits or hyphens"
            )
    agents = tuple(
        ServiceAgent(
            key,
            get(table, f"gcp.service_agents.{key}", "member", str),
            str(table.get("about", "")),
            _grants(f"gcp.service_agents.{key}", table.get("grants")),
        )
        for key, table in gcp.get("service_agents", {}).items()
    )
    conditions = tuple(
        Condition(
            key,
            get(table, f"gcp.conditions.{key}", "title", str),
            get(table, f"gcp.conditions.{key}", "description", str),
            get(table, f"gcp.conditions.{key}", "expression", str),
        )
        for key, table in gcp.get("conditions", {}).items()
    )
    build_account = get(gcp, "gcp", "build_service_account", str)
    if build_account not in {account.key for account in accounts}:
        raise DeployConfigError(
            f"{path.name}: gcp.build_service_account {build_account!r} is no [gcp.service_accounts.*]; "
            f"known: {', '.join(a.key for a in accounts)}"
        )
    build_timeout = get(gcp, "gcp", "build_timeout", str)
    if not _DURATION.match(build_timeout):
        raise DeployConfigError(f"{path.name}: gcp.build_timeout must look like 3600s or 2h, found {build_timeout!r}")
    retention = get(gcp, "gcp", "dead_letter_retention", str)
    if not _DURATION.match(retention):
        raise DeployConfigError(f"{path.name}: gcp.dead_letter_retention must look like 7d or 12h, found {retention!r}")
    config = DeployConfig(
        runtime=get(gcp, "gcp", "runtime", str),
        apis=tuple(get(gcp, "gcp", "apis", list)),
        landing_bucket=get(gcp, "gcp", "landing_bucket", str),
        artifacts_bucket=get(gcp, "gcp", "artifacts_bucket", str),
        code_bucket=get(gcp, "gcp", "code_bucket", str),
        job_regions=tuple(gcp.get("job_regions", [])),
        log_sink=get(gcp, "gcp", "log_sink", str),
        dead_letter_retention=retention,
        firestore_indexes=get(gcp, "gcp", "firestore_indexes", str),
        functions=tuple(functions),
        service_accounts=accounts,
        service_agents=agents,
        conditions=conditions,
        build_account=build_account,
        build_timeout=build_timeout,
        ui=_ui(gcp.get("ui"), path.name),
    )
    if "{region}" not in config.artifacts_bucket:
        raise DeployConfigError(f"{path.name}: gcp.artifacts_bucket must contain {{region}} (one bucket per region)")
    _check_targets(config, load_topology(path), raw.get("topics", {}))
    return config
