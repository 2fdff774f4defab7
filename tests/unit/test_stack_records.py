"""The pure parts of the local stack's bookkeeping: the subscriptions it provisions, its stack.json record, and
the refusals of `landfall restart` when there is nothing to restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.local import persistence, record, stack
from deploy.local.processes import RunningService, StackError
from deploy.local.provision import subscription_requests
from deploy.local.record import StackRecord
from deploy.topology import load_topology


def test_the_stack_provisions_pull_subscriptions_with_the_dead_letter_policy_and_a_dead_letter_hold() -> None:
    topology = load_topology()
    requests = {r["name"].rsplit("/", 1)[1]: r for r in subscription_requests(topology, "proj")}
    for route in topology.functions:
        request = requests[route.subscription]
        assert request["topic"] == f"projects/proj/topics/{route.topic}"
        assert request["ack_deadline_seconds"] == route.ack_deadline_seconds
        assert request["dead_letter_policy"] == {
            "dead_letter_topic": "projects/proj/topics/landfall-dead-letter",
            "max_delivery_attempts": route.dead_letter.max_delivery_attempts,
        }
        # The bridge pushes and applies the back-off; the emulator's own would add to it.
        assert "push_config" not in request and "retry_policy" not in request
    assert requests[topology.dead_letter_subscription]["topic"] == "projects/proj/topics/landfall-dead-letter"


def _record(tmp_path: Path) -> StackRecord:
    services = (
        RunningService("pubsub", 101, 9085, tmp_path / "logs/pubsub.log"),
        RunningService("bridge", 102, None, tmp_path / "logs/bridge.log"),
    )
    return StackRecord(
        services=services,
        env={"PUBSUB_EMULATOR_HOST": "127.0.0.1:9085"},
        ports={"pubsub": 9085},
        service_env={"LANDFALL_ROUTES_FILE": "/r.toml"},
        every_seconds=2,
    )


def test_the_record_round_trips_and_replacing_a_service_keeps_the_order(tmp_path: Path) -> None:
    before = _record(tmp_path)
    record.write(tmp_path, before)
    assert record.read(tmp_path) == before
    after = before.replacing(RunningService("pubsub", 555, 9085, tmp_path / "logs/pubsub.log"))
    assert [(s.name, s.pid) for s in after.services] == [("pubsub", 555), ("bridge", 102)]
    record.remove(tmp_path)
    assert record.read(tmp_path) is None


def test_a_record_written_before_ports_were_kept_is_still_read(tmp_path: Path) -> None:
    (tmp_path / "stack.json").write_text(
        json.dumps(
            {
                "services": [
                    {"name": "pubsub", "pid": 7, "port": 8085, "log_path": "/l/pubsub.log"},
                    {"name": "scheduler", "pid": 8, "port": None, "log_path": "/l/scheduler.log"},
                ],
                "env": {"A": "1"},
            }
        )
    )
    old = record.read(tmp_path)
    assert old is not None
    assert old.ports == {"pubsub": 8085} and old.service_env == {} and old.every_seconds is None


def test_restart_needs_a_recorded_stack_and_a_service_of_it(tmp_path: Path) -> None:
    with pytest.raises(StackError, match=r"no local stack is recorded in .*; `landfall up` starts one"):
        stack.restart("dispatch", tmp_path)
    record.write(tmp_path, _record(tmp_path))
    with pytest.raises(StackError, match="unknown service 'dispach'; the stack's services: pubsub, firestore"):
        stack.restart("dispach", tmp_path)


def test_down_wipe_with_nothing_running_still_drops_the_kept_data(tmp_path: Path) -> None:
    for folder in persistence.kept_dirs(tmp_path):
        (folder / "x").mkdir(parents=True)
    logs = tmp_path / "logs"
    logs.mkdir()
    assert stack.down(tmp_path) == []
    assert all(folder.exists() for folder in persistence.kept_dirs(tmp_path))
    assert stack.down(tmp_path, wipe=True) == []
    assert not any(folder.exists() for folder in persistence.kept_dirs(tmp_path))
    assert logs.exists()


def test_a_firestore_snapshot_pointer_without_its_export_is_reported(tmp_path: Path) -> None:
    assert persistence.latest_firestore_snapshot(tmp_path) is None
    folder = persistence.firestore_dir(tmp_path)
    folder.mkdir(parents=True)
    (folder / persistence.LATEST).write_text("snapshot-1")
    with pytest.raises(StackError, match=r"names a Firestore snapshot without snapshot-1\.overall_export_metadata"):
        persistence.latest_firestore_snapshot(tmp_path)
    (folder / "snapshot-1").mkdir()
    (folder / "snapshot-1" / "snapshot-1.overall_export_metadata").write_bytes(b"")
    assert persistence.latest_firestore_snapshot(tmp_path) == folder / "snapshot-1/snapshot-1.overall_export_metadata"


def test_service_env_keeps_landfall_settings_but_not_the_stacks_own_variables() -> None:
    environ = {"LANDFALL_ROUTES_FILE": "/r", "LANDFALL_LANDING_BUCKET": "b", "LANDFALL_STATE_DIR": "/s", "PATH": "/x"}
    assert stack._service_env(environ, {"LANDFALL_LANDING_BUCKET": "b"}) == {"LANDFALL_ROUTES_FILE": "/r"}


def test_a_stack_recorded_by_an_older_landfall_is_not_restarted_piecemeal(tmp_path: Path) -> None:
    record.write(tmp_path, _record(tmp_path))  # two services, not the whole stack this version starts
    with pytest.raises(StackError, match=r"started by another version of landfall .* `landfall down` then"):
        stack.restart("pubsub", tmp_path)
