"""Publishing one tick of a topology schedule now, as Cloud Scheduler (or the local scheduler) would: what
`landfall sweep` and `landfall reconcile` do."""

from __future__ import annotations

from datetime import UTC, datetime


def fed_by_schedule(schedule_name: str) -> str:
    """The function the named schedule's ticks drive (deploy/topology.toml), for help texts."""
    from deploy.topology import load_topology

    topology = load_topology()
    return topology.fed_by(topology.schedule(schedule_name).topic).name


def publish_schedule_tick(schedule_name: str) -> str:
    """Publish one tick of the named schedule to its topic; returns the line to print. Raises CommandError when the
    topic does not exist or Pub/Sub cannot be reached."""
    from google.api_core.exceptions import NotFound
    from google.cloud import pubsub_v1

    from deploy.local.scheduler import publish_tick, topic_path
    from deploy.topology import load_topology
    from functions.settings import get_settings
    from landfall.errors import CommandError, client_boundary

    schedule = load_topology().schedule(schedule_name)
    with client_boundary(f"publish to the {schedule.topic} topic"):
        project = get_settings().project
        topic = topic_path(project, schedule.topic)
        try:
            message_id = publish_tick(pubsub_v1.PublisherClient(), project, schedule, datetime.now(UTC))
        except NotFound as exc:
            raise CommandError(
                f"topic {topic} does not exist: `landfall up` creates it on the local stack, "
                "the deployer in Google Cloud"
            ) from exc
    return f"published one {schedule.name} tick to {topic}: message id {message_id}"
