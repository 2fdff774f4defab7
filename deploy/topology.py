"""Loads deploy/topology.toml into frozen records: the one description of topics, subscriptions and functions."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

TOPOLOGY_FILE = resources.files("deploy").joinpath("topology.toml")
"""Package data of deploy/ (pyproject's package-data ships it with the functions' source)."""


class TopologyError(ValueError):
    """deploy/topology.toml is missing a value or holds a wrong one."""


@dataclass(frozen=True)
class FunctionRoute:
    """One Cloud Function and the push subscription that feeds it."""

    name: str
    topic: str
    subscription: str
    ack_deadline_seconds: int


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
    dataset_prefix: str
    runs_prefix: str
    notification_topic: str
    runs_collection: str
    datasets_collection: str
    dataset_versions_collection: str
    object_events_topic: str
    requests_topic: str
    requests_schema_id: str
    requests_schema_file: str
    job_events_topic: str
    ingest_sweep_topic: str
    functions: tuple[FunctionRoute, ...]
    schedules: tuple[Schedule, ...]
    local_ports: dict[str, int]

    def function(self, name: str) -> FunctionRoute:
        for route in self.functions:
            if route.name == name:
                return route
        raise TopologyError(f"no function {name!r} in topology; known: {[f.name for f in self.functions]}")

    @property
    def topics(self) -> tuple[str, ...]:
        return (self.object_events_topic, self.requests_topic, self.job_events_topic, self.ingest_sweep_topic)

    def schedule(self, name: str) -> Schedule:
        for schedule in self.schedules:
            if schedule.name == name:
                return schedule
        raise TopologyError(f"no schedule {name!r} in topology; known: {[s.name for s in self.schedules]}")


@cache
def load_topology(path: Traversable = TOPOLOGY_FILE) -> Topology:
    """Parse and check the topology file; every missing key is reported by its dotted name."""
    raw = tomllib.loads(path.read_text())

    def get(*keys: str) -> object:
        node: object = raw
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                raise TopologyError(f"{path.name}: missing `{'.'.join(keys)}`")
            node = node[key]
        return node

    functions = tuple(
        FunctionRoute(
            name=name,
            topic=str(get("functions", name, "topic")),
            subscription=str(get("functions", name, "subscription")),
            ack_deadline_seconds=int(get("functions", name, "ack_deadline_seconds")),  # type: ignore[call-overload]
        )
        for name in get("functions")  # type: ignore[union-attr]
    )
    schedules = tuple(
        Schedule(
            name=name,
            topic=str(get("schedules", name, "topic")),
            every_seconds=int(get("schedules", name, "every_seconds")),  # type: ignore[call-overload]
            cron=str(get("schedules", name, "cron")),
        )
        for name in get("schedules")  # type: ignore[union-attr]
    )
    topology = Topology(
        project_id=str(get("project", "local_id")),
        default_region=str(get("project", "default_region")),
        bucket=str(get("bucket", "name")),
        dataset_prefix=str(get("bucket", "dataset_prefix")),
        runs_prefix=str(get("bucket", "runs_prefix")),
        notification_topic=str(get("bucket", "notification", "topic")),
        runs_collection=str(get("firestore", "runs_collection")),
        datasets_collection=str(get("firestore", "datasets_collection")),
        dataset_versions_collection=str(get("firestore", "dataset_versions_collection")),
        object_events_topic=str(get("topics", "object_events", "name")),
        requests_topic=str(get("topics", "training_requests", "name")),
        requests_schema_id=str(get("topics", "training_requests", "schema_id")),
        requests_schema_file=str(get("topics", "training_requests", "schema_file")),
        job_events_topic=str(get("topics", "job_events", "name")),
        ingest_sweep_topic=str(get("topics", "ingest_sweep", "name")),
        functions=functions,
        schedules=schedules,
        local_ports={k: int(v) for k, v in get("local", "ports").items()},  # type: ignore[union-attr]
    )
    for route in functions:
        if route.topic not in topology.topics:
            raise TopologyError(f"{path.name}: function {route.name} listens on unknown topic {route.topic!r}")
    for schedule in schedules:
        if schedule.topic not in topology.topics:
            raise TopologyError(f"{path.name}: schedule {schedule.name} publishes to unknown topic {schedule.topic!r}")
        if schedule.every_seconds < 1:
            raise TopologyError(f"{path.name}: schedules.{schedule.name}.every_seconds must be >= 1")
    if topology.notification_topic != topology.object_events_topic:
        raise TopologyError(f"{path.name}: bucket.notification.topic must be topics.object_events.name")
    return topology
