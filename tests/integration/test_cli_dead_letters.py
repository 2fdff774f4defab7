"""`landfall dead-letters` against Google's Pub/Sub emulator: messages really dead-lettered by the emulator (each
nacked on its function's subscription until the topology's max_delivery_attempts), reported with their source
subscription, attempts and reason, and left on the hold subscription for the next look."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.local import provision
from deploy.topology import load_topology
from landfall.cli import build_parser
from tests.conftest import PROJECT, Emulator
from tests.polling import wait_for

pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")


def landfall(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    args: argparse.Namespace = build_parser().parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


@pytest.fixture()
def subscriber(pubsub_emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The topology's topics and subscriptions, the hold subscription emptied, the state dir in tmp_path."""
    from google.cloud import pubsub_v1

    from functions.settings import get_settings

    topology = load_topology()
    provision.create_topics(topology, PROJECT)
    provision.create_subscriptions(topology, PROJECT)
    monkeypatch.setenv(provision.STATE_DIR_ENV, str(tmp_path))
    get_settings.cache_clear()
    client = pubsub_v1.SubscriberClient()
    hold = f"projects/{PROJECT}/subscriptions/{topology.dead_letter_subscription}"
    while received := client.pull(
        request={"subscription": hold, "max_messages": 100, "return_immediately": True}, timeout=10
    ).received_messages:
        client.acknowledge(request={"subscription": hold, "ack_ids": [m.ack_id for m in received]})
    yield client
    client.close()
    get_settings.cache_clear()


def dead_letter(subscriber: Any, function: str, data: bytes) -> str:
    """Publish to the function's topic and nack every delivery until the emulator dead-letters the message."""
    from google.cloud import pubsub_v1

    route = load_topology().function(function)
    message_id = (
        pubsub_v1.PublisherClient()
        .publish(f"projects/{PROJECT}/topics/{route.topic}", data, origin="test")
        .result(timeout=30)
    )
    subscription = f"projects/{PROJECT}/subscriptions/{route.subscription}"
    attempts = 0

    def nacked_until_gone() -> bool:
        nonlocal attempts
        received = subscriber.pull(
            request={"subscription": subscription, "max_messages": 10, "return_immediately": True}, timeout=10
        ).received_messages
        mine = [m for m in received if m.message.message_id == message_id]
        if received:
            subscriber.modify_ack_deadline(
                request={
                    "subscription": subscription,
                    "ack_deadline_seconds": 0,
                    "ack_ids": [m.ack_id for m in received],
                }
            )
        attempts += len(mine)
        return attempts >= route.dead_letter.max_delivery_attempts and not mine

    wait_for(nacked_until_gone, 60, f"message {message_id} dead-lettered from {route.subscription}", step=0.05)
    return str(message_id)


TICK = b'{"tick": 1}'
BAD_REQUEST = b'{"dataset": {"uri": "s3://elsewhere/"}, "task": "tabular-classification"}'


def sweep_log_of_a_failed_delivery(message_id: str) -> str:
    """What sweep_datasets writes when a delivery fails for a transient reason: its entry point, run on TICK."""
    import base64
    import io
    import logging

    from cloudevents.http import CloudEvent

    from functions import main
    from functions.errors import TransientError

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(main._JsonLines())
    main.log.addHandler(handler)
    event = CloudEvent(
        {"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": "test", "id": message_id},
        {"message": {"data": base64.b64encode(TICK).decode(), "messageId": message_id}},
    )

    def failing() -> str:
        raise TransientError("Firestore unavailable; will retry")

    try:
        with pytest.raises(TransientError):
            main._run("sweep_datasets", event, failing)
    finally:
        main.log.removeHandler(handler)
    return out.getvalue()


def test_dead_letters_are_reported_with_source_attempts_and_reason_and_left_in_place(
    subscriber: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = dead_letter(subscriber, "dispatch", BAD_REQUEST)
    tick = dead_letter(subscriber, "sweep_datasets", TICK)
    # The sweep function logged each failed delivery naming the message and its body's digest (functions/main.py,
    # the real entry point and its real log line); the dead letter has a new id, so the report finds it by digest.
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "sweep_datasets.log").write_text(sweep_log_of_a_failed_delivery(tick))
    capsys.readouterr()  # the entry point's own stdout handler wrote the line too

    code, out = landfall(["dead-letters", "--json"], capsys)
    printed = json.loads(out)
    # A dead letter is a new message on the dead-letter topic (a new id); the reports are keyed by where it came from.
    reports = {r["function"]: r for r in printed}
    assert code == 0 and len(printed) == 2 and set(reports) == {"dispatch", "sweep_datasets"}, printed
    assert not {r["message_id"] for r in printed} & {bad, tick}
    dispatch = load_topology().function("dispatch")
    bad_report = reports["dispatch"]
    assert bad_report["subscription"] == dispatch.subscription
    assert bad_report["delivery_attempts"] == dispatch.dead_letter.max_delivery_attempts
    assert bad_report["reason"].startswith("not a TrainingRequest: ") and "dataset.uri" in bad_report["reason"]
    assert bad_report["preview"].startswith('{"dataset": {"uri": "s3://elsewhere/"}')
    assert bad_report["attributes"] == {"origin": "test"} and bad_report["published_at"].endswith("Z")
    assert "will be retried: Firestore unavailable" in reports["sweep_datasets"]["reason"]

    code, text = landfall(["dead-letters"], capsys)
    assert code == 0 and "2 dead letter(s)" in text
    assert f"message {bad_report['message_id']}  from dispatch ({dispatch.subscription})" in text
    # Nothing was consumed: a second look (with a limit) finds them again.
    code, again = landfall(["dead-letters", "--json", "--limit", "1"], capsys)
    assert code == 0 and len(json.loads(again)) == 1
    code, out = landfall(["dead-letters", "--json"], capsys)
    assert sorted(r["message_id"] for r in json.loads(out)) == sorted(r["message_id"] for r in printed)
