"""Pure parts of the local stack: service order vs topology, port overrides, the sweep period, the tick message,
and what `landfall up` refuses before it starts anything."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from deploy.local import stack
from deploy.local.processes import StackError
from deploy.local.scheduler import Tick, next_due, periods, tick_for
from deploy.topology import load_topology


def test_service_order_holds_every_function_in_topology_order_then_the_scheduler() -> None:
    topology = load_topology()
    functions = [route.name for route in topology.functions]
    assert "sweep_datasets" in functions
    assert [n for n in stack.SERVICE_ORDER if n in functions] == functions
    assert stack.SERVICE_ORDER[-1] == "scheduler"
    assert stack.SERVICE_ORDER.index("scheduler") > max(stack.SERVICE_ORDER.index(f) for f in functions)
    ported = [n for n in stack.SERVICE_ORDER if n not in stack.PORTLESS_SERVICES]
    assert sorted(ported) == sorted(topology.local_ports)


def test_every_service_may_be_given_port_zero_and_only_ported_ones_get_a_port() -> None:
    ports = stack.resolve_ports(load_topology(), {name: 0 for name in stack.SERVICE_ORDER})
    assert set(ports) == set(stack.SERVICE_ORDER) - stack.PORTLESS_SERVICES
    assert all(port > 0 for port in ports.values())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"scheduler": 9000}, "scheduler listens on no port; --port applies to: pubsub, "),
        ({"sweep": 9000}, "unknown service 'sweep' in --port; services with a port: .*sweep_datasets"),
    ],
)
def test_bad_port_overrides_name_the_valid_services(overrides: dict[str, int], message: str) -> None:
    with pytest.raises(StackError, match=message):
        stack.resolve_ports(load_topology(), overrides)


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("", None), (" ", None), ("1", 1), ("60", 60)])
def test_sweep_period_override(value: str | None, expected: int | None) -> None:
    environ = {} if value is None else {stack.SWEEP_EVERY_ENV: value}
    assert stack.every_seconds_override(environ) == expected


@pytest.mark.parametrize("value", ["0", "-1", "0.5", "1s", "soon"])
def test_bad_sweep_period_says_what_is_expected(value: str) -> None:
    with pytest.raises(StackError, match=rf"LANDFALL_SWEEP_EVERY_SECONDS must be .*, got '{value}'"):
        stack.every_seconds_override({stack.SWEEP_EVERY_ENV: value})


def test_tick_message_is_json_with_the_schedule_and_utc_time_and_an_attribute() -> None:
    paris = timezone(timedelta(hours=1))
    tick = tick_for("ingest_sweep", datetime(2026, 11, 22, 17, 10, 42, 123456, tzinfo=paris))
    assert tick == Tick(
        data=b'{"schedule":"ingest_sweep","tick_at":"2026-11-22T16:10:42.123Z"}',
        attributes={"schedule": "ingest_sweep"},
    )
    assert json.loads(tick.data)["tick_at"].endswith("Z")


def test_periods_take_the_topology_value_unless_overridden() -> None:
    schedules = load_topology().schedules
    assert periods(schedules, None) == {s.name: float(s.every_seconds) for s in schedules}
    assert set(periods(schedules, 1).values()) == {1.0}


@pytest.mark.parametrize(
    ("due", "now", "expected"),
    [
        (10.0, 10.2, 11.0),  # on time: one period later
        (10.0, 11.0, 12.0),  # a tick falling exactly on now is skipped
        (10.0, 13.5, 14.0),  # slow publish: missed ticks are skipped, not bunched
    ],
)
def test_next_due(due: float, now: float, expected: float) -> None:
    assert next_due(due, 1.0, now) == expected


def test_unknown_port_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="unknown service 'pubsbu'"):
        stack.up(tmp_path, {"pubsbu": 1234})


def test_a_port_for_the_scheduler_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="scheduler listens on no port"):
        stack.up(tmp_path, {"scheduler": 1234})
    assert stack.read_state(tmp_path) == []


def test_a_bad_sweep_period_is_refused_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(stack.SWEEP_EVERY_ENV, "0.5")
    with pytest.raises(StackError, match=rf"{stack.SWEEP_EVERY_ENV} must be a whole number of seconds >= 1"):
        stack.up(tmp_path, {name: 0 for name in stack.SERVICE_ORDER})
    assert stack.read_state(tmp_path) == []


@pytest.mark.parametrize("images", ["/tmp/images.json", None])
def test_the_vertex_emulator_gets_the_images_map_named_by_landfall_vertex_images(
    tmp_path: Path, images: str | None
) -> None:
    from deploy.local.record import StackRecord

    topology = load_topology()
    ports = stack.resolve_ports(topology, {name: 1 for name in topology.local_ports})
    service_env = {stack.VERTEX_IMAGES_ENV: images} if images else {}
    current = StackRecord((), stack.stack_env(topology, ports), ports, service_env)
    argv = stack._Plan(topology, tmp_path, current).spec("vertex").argv
    assert (argv[argv.index("--images") + 1] if "--images" in argv else None) == images


@pytest.mark.parametrize("faults", ["/tmp/rate-limits.toml", None])
def test_the_vertex_emulator_gets_the_fault_plan_named_by_landfall_vertex_faults(
    tmp_path: Path, faults: str | None
) -> None:
    """Vertex's rate limits (or any fault plan) on a whole local stack, from `up` on."""
    from deploy.local.record import StackRecord

    topology = load_topology()
    ports = stack.resolve_ports(topology, {name: 1 for name in topology.local_ports})
    service_env = {stack.VERTEX_FAULTS_ENV: faults} if faults else {}
    current = StackRecord((), stack.stack_env(topology, ports), ports, service_env)
    argv = stack._Plan(topology, tmp_path, current).spec("vertex").argv
    assert (argv[argv.index("--faults") + 1] if "--faults" in argv else None) == faults


def test_the_ports_a_stack_starts_from_free_default_or_the_last_stacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One switch for free ports (LANDFALL_PORTS=free, `landfall up --free-ports`), and the ports
    of the last stack in the state folder reused by the next `up`; a port it had picked free that is taken now is
    picked afresh, one that was chosen is kept."""
    from deploy.local import processes

    topology = load_topology()
    defaults = dict(topology.local_ports)
    assert stack.ports_mode({}) is None and stack.ports_mode({stack.PORTS_ENV: "FREE"}) == "free"
    assert stack.ports_mode({stack.PORTS_ENV: "free"}, "default") == "default"  # the flag wins
    with pytest.raises(StackError, match="LANDFALL_PORTS must be one of free, default, got 'any'"):
        stack.ports_mode({stack.PORTS_ENV: "any"})
    assert stack.base_ports(topology, tmp_path, None) == defaults  # nothing kept yet
    assert stack.base_ports(topology, tmp_path, "free") == dict.fromkeys(defaults, 0)
    last = {name: 40000 + i for i, name in enumerate(defaults)}
    stack.remember_ports(tmp_path, last, frozenset({"pubsub"}))
    taken = {last["pubsub"], last["firestore"]}
    monkeypatch.setattr(processes, "port_is_free", lambda port, host="127.0.0.1": port not in taken)
    assert stack.base_ports(topology, tmp_path, None) == last | {"pubsub": 0}  # firestore's was chosen: kept
    assert stack.base_ports(topology, tmp_path, "default") == defaults


def test_local_iam_is_on_unless_turned_off_and_a_wrong_value_is_refused() -> None:
    assert stack.iam_enforced({}) is True
    assert stack.iam_enforced({stack.LOCAL_IAM_ENV: "ON"}) is True
    assert stack.iam_enforced({stack.LOCAL_IAM_ENV: "off"}) is False
    with pytest.raises(StackError, match=r"expected on .* or off"):
        stack.iam_enforced({stack.LOCAL_IAM_ENV: "false"})


def test_job_regions_are_the_default_one_and_those_asked_for_each_with_its_artifacts_bucket() -> None:
    topology = load_topology()
    regions = stack.job_regions({stack.JOB_REGIONS_ENV: " europe-west4, us-central1 ,"}, topology)
    assert regions == (topology.default_region, "europe-west4")
    env = stack.stack_env(
        topology, {"storage_front": 1, "pubsub": 2, "firestore": 3, "vertex": 4, "pubsub_front": 5}, regions
    )
    buckets = dict(pair.split("=") for pair in env["LANDFALL_ARTIFACT_BUCKETS"].split(","))
    assert buckets == {r: f"{topology.project_id}-landfall-artifacts-{r}" for r in regions}
    assert env["STORAGE_EMULATOR_HOST"].endswith(":1") and env["LANDFALL_OUTPUT_BUCKET"] == buckets[regions[0]]
