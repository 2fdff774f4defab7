"""The IAM policy `landfall deploy` would set, as a policy the local stack can check calls against.

The bindings come from the same code that renders the deploy's gcloud commands (deploy/gcp/iam.py grants_on,
deploy/gcp/team_access.py): every service account's grants, each team's trainer identity and its members, resolved
against the local stack's names (its landing, code and per-region artifacts buckets, its project). Roles expand to
their documented permissions (roles.toml); an IAM condition is evaluated as IAM evaluates it, a CEL expression over
`resource.name`, `resource.type` and `api.getAttribute(...)` (cel-python). A call is allowed when some binding of the
caller on the resource, or on the project, holds the permission and its condition is true.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import celpy
from celpy import celtypes

from deploy.gcp import iam, team_access
from deploy.gcp.config import DeployConfig
from deploy.gcp.iam import Names, Resource
from deploy.gcp.steps import Later
from deploy.teams import Teams
from deploy.topology import Topology

ROLES_FILE = resources.files("deploy.local_iam").joinpath("roles.toml")
LIST_PREFIX_ATTRIBUTE = "storage.googleapis.com/objectListPrefix"
BUCKET_TYPE = "storage.googleapis.com/Bucket"
OBJECT_TYPE = "storage.googleapis.com/Object"


@cache
def role_permissions() -> Mapping[str, frozenset[str]]:
    """role -> the permissions it holds (roles.toml)."""
    raw: dict[str, Any] = tomllib.loads(ROLES_FILE.read_text())
    return {role: frozenset(table["permissions"]) for role, table in raw["roles"].items()}


def condition_expression(flag: str) -> str:
    """The CEL expression of a gcloud --condition value (`expression=...,title=...`, or with `^;^` pairs split on
    ';'); "" for none."""
    if not flag or flag == "None":
        return ""
    separator = ","
    body = flag
    if flag.startswith("^") and flag[2:3] == "^":
        separator, body = flag[1], flag[3:]
    if not body.startswith("expression="):
        raise ValueError(f"an IAM condition flag must start with expression=, got {flag!r}")
    expression, found, _ = body[len("expression=") :].partition(f"{separator}title=")
    if not found:
        raise ValueError(f"an IAM condition flag must name its title after the expression, got {flag!r}")
    return expression


@dataclass(frozen=True)
class Binding:
    """One member's role on one resource, under an optional condition (a CEL expression, "" none)."""

    member: str
    role: str
    resource: Resource
    expression: str = ""

    def describe(self) -> str:
        where = f"{self.resource.kind} {self.resource.name}"
        return f"{self.role} on {where}" + (" (with a condition)" if self.expression else "")


@dataclass(frozen=True)
class Target:
    """What a call acts on: a bucket, an object in it (object_name), or a list under a prefix (list_prefix)."""

    bucket: str
    object_name: str | None = None
    list_prefix: str | None = None

    @property
    def resource_name(self) -> str:
        base = f"projects/_/buckets/{self.bucket}"
        return base if self.object_name is None else f"{base}/objects/{self.object_name}"

    @property
    def resource_type(self) -> str:
        return BUCKET_TYPE if self.object_name is None else OBJECT_TYPE


@cache
def _program(expression: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression), functions={"getAttribute": _get_attribute})


def _get_attribute(api: Any, name: Any, default: Any) -> Any:
    return api.get(name, default)


def condition_holds(expression: str, target: Target) -> bool:
    """Whether a binding's condition lets it apply to target (True for none). An expression that cannot be
    evaluated on this resource (an error, as IAM treats one) is false."""
    if not expression:
        return True
    return _holds(expression, target.resource_name, target.resource_type, target.list_prefix or "")


@lru_cache(maxsize=1 << 16)
def _holds(expression: str, name: str, kind: str, list_prefix: str) -> bool:
    """condition_holds, kept per (expression, resource, listed prefix): a CEL evaluation costs about a millisecond,
    and a job reads the same objects again and again."""
    s = celtypes.StringType
    activation = {
        "resource": celtypes.MapType({s("name"): s(name), s("type"): s(kind)}),
        "api": celtypes.MapType({s(LIST_PREFIX_ATTRIBUTE): s(list_prefix)}),
    }
    try:
        result = _program(expression).evaluate(activation)
    except celpy.CELEvalError:
        return False
    return isinstance(result, celtypes.BoolType) and bool(result)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    binding: Binding | None = None
    """The binding that allowed it (None when refused)."""


@dataclass(frozen=True)
class Policy:
    project: str
    bindings: tuple[Binding, ...]
    roles: Mapping[str, frozenset[str]] = field(default_factory=role_permissions)

    def check(self, member: str, permission: str, target: Target) -> Decision:
        for binding in self.bindings:
            if binding.member != member or permission not in self.roles.get(binding.role, frozenset()):
                continue
            on = binding.resource
            applies = on.kind == "project" or (on.kind == "bucket" and on.name == target.bucket)
            if applies and condition_holds(binding.expression, target):
                return Decision(True, binding)
        return Decision(False)

    def check_resource(self, member: str, permission: str, kind: str, name: str) -> Decision:
        """A permission on a resource other than Cloud Storage's: the project (kind "project"), a service account
        (kind "service_account", name its email) or a topic (kind "topic", name its id). A project-level grant holds
        on every resource of the project."""
        full = {
            "project": f"projects/{self.project}",
            "topic": f"projects/{self.project}/topics/{name}",
        }.get(kind, f"projects/-/serviceAccounts/{name}")
        for binding in self.bindings:
            if binding.member != member or permission not in self.roles.get(binding.role, frozenset()):
                continue
            on = binding.resource
            applies = on.kind == "project" or (on.kind == kind and on.name == name)
            if applies and (not binding.expression or _holds(binding.expression, full, kind, "")):
                return Decision(True, binding)
        return Decision(False)

    def of(self, member: str) -> tuple[Binding, ...]:
        return tuple(b for b in self.bindings if b.member == member)

    def granted_alike(self, bucket: str, others: Iterable[str]) -> Policy:
        """This policy plus, on each of others, every unconditional grant held on bucket: buckets outside the
        deployment that their owners opened to Landfall's readers as its landing bucket is (LANDFALL_ALLOWED_BUCKETS,
        docs/ingest.md)."""
        added = tuple(
            Binding(b.member, b.role, Resource("bucket", other), "")
            for other in others
            if other != bucket
            for b in self.bindings
            if b.resource == Resource("bucket", bucket) and not b.expression
        )
        return Policy(self.project, self.bindings + added, self.roles)


def _bindings(rows: Iterable[tuple[str, str, Resource]]) -> list[Binding]:
    return [Binding(member, role, r, condition_expression(r.condition)) for member, role, r in rows]


def deployed_policy(config: DeployConfig, names: Names, teams: Teams, runs_prefix: str) -> Policy:
    """Every binding `landfall deploy` makes for these names and teams, on the kinds of resource the gate checks."""
    kinds = frozenset({"project", "bucket", "service_account", "topic"})
    rows: list[tuple[str, str, Resource]] = []
    for _holder, member, role, resource in iam.grants_on(kinds, config, names):
        if not isinstance(member, Later):  # a service agent named by the project's number: none acts here
            rows.append((member, role, resource))
    submitting = team_access.submitters(config)
    for team in teams.teams:
        rows += team_access.account_grants(team, names, runs_prefix, submitting)
        rows += team_access.member_grants(team, names)
    return Policy(names.project, tuple(b for b in _bindings(rows) if b.resource.kind in kinds))


def local_names(
    topology: Topology, config: DeployConfig, artifact_buckets: Mapping[str, str], landing: str, code: str
) -> Names:
    """The deploy's names on the local stack: its project, its buckets (artifact_buckets: region -> bucket)."""
    project = topology.project_id
    regions = tuple(artifact_buckets)
    names = iam.names_for(topology, config, project, topology.default_region, regions or (topology.default_region,))
    return replace(
        names,
        landing_bucket=landing,
        job_regions=regions,
        artifact_buckets=tuple(artifact_buckets.values()),
        code_bucket=code,
    )


__all__ = [
    "Binding",
    "Decision",
    "Policy",
    "Target",
    "condition_expression",
    "condition_holds",
    "deployed_policy",
    "local_names",
    "role_permissions",
]
