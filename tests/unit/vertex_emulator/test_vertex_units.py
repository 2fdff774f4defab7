"""Pure-logic tables of the emulator's parts (no server): filter grammar, paging tokens, replica environment,
validation of machine shapes, fault plans and log paths."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import pytest
from google.cloud.aiplatform_v1.types import CustomJob, Model, WorkerPoolSpec

from deploy.vertex_emulator import replica_log_paths
from deploy.vertex_emulator.catalog import load_catalog
from deploy.vertex_emulator.config import ConfigError
from deploy.vertex_emulator.faults import MINUTES_KEPT, FaultPlan, parse_rules, rate_quota
from deploy.vertex_emulator.filters import JOB_FIELDS, MODEL_FIELDS, VERSION_FIELDS, FilterError, parse_filter
from deploy.vertex_emulator.launch import ReplicaSlot, replica_environment
from deploy.vertex_emulator.models import ALIAS
from deploy.vertex_emulator.paging import PageTokenError, page, page_in_order
from deploy.vertex_emulator.runner import exit_status
from deploy.vertex_emulator.validation import check_machine
from tests.fakes.vertex import job_state


def _job(
    number: int,
    *,
    name: str = "job",
    state: str = "JOB_STATE_RUNNING",
    labels: dict | None = None,
    created: str = "2026-01-01T00:00:00+00:00",
    updated: str | None = None,
) -> CustomJob:
    return CustomJob(
        name=f"projects/p/locations/l/customJobs/{number}",
        display_name=name,
        state=job_state(state),
        labels=labels or {},
        create_time=datetime.fromisoformat(created),
        update_time=datetime.fromisoformat(updated or created),
    )


JOBS = [
    _job(1, name="alpha", labels={"a": "1"}),
    _job(2, name="beta", state="JOB_STATE_FAILED", labels={"a": "2", "b": "x"}, updated="2026-03-01T00:00:00+00:00"),
    _job(3, name='gamma "q"', labels={"b": "y"}, created="2026-02-01T00:00:00+00:00"),
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # AIP-160: OR binds tighter than AND.
        ('labels.a="1" AND labels.b:* OR state="JOB_STATE_RUNNING"', [1]),
        ('(labels.a="1" AND labels.b:*) OR state="JOB_STATE_FAILED"', [2]),
        ("labels.b:* labels.a:*", [2]),
        ('NOT NOT labels.a="2"', [2]),
        ("labels:b", [2, 3]),
        ('labels.b:"x*"', [2]),
        ('display_name="gamma \\"q\\""', [3]),
        ('display_name:"*a"', [1, 2]),
        ('display_name:"g?mma*"', []),
        ('create_time>="2026-02-01T00:00:00Z"', [3]),
        ('create_time!="2026-01-01T00:00:00Z"', [3]),
        # update_time, in create_time's syntax: the reconciler's "changed since its last pass" (with OR: orphans).
        ('update_time>="2026-02-15T00:00:00Z"', [2]),
        ('labels.a:* AND (update_time>"2026-02-15T00:00:00+00:00" OR create_time>="2026-01-01T00:00:00Z")', [1, 2]),
        ('update_time<"2026-02-01T00:00:01Z"', [1, 3]),
        ("   ", [1, 2, 3]),
    ],
)
def test_filter_grammar(text, expected):
    matches = parse_filter(text)
    assert [int(job.name.rsplit("/", 1)[-1]) for job in JOBS if matches(job)] == expected


BAD_FILTERS = [
    "labels.a=",
    "AND labels.a=1",
    'labels.a="1")',
    "labels=1",
    "name=x",
    'state:"x"',
    "update_time>yesterday",
    'update_time:"2026-01-01T00:00:00Z"',
    'update_time>"2026-01-01T00:00:00"',
]


@pytest.mark.parametrize("text", BAD_FILTERS)
def test_filter_errors(text):
    with pytest.raises(FilterError):
        parse_filter(text)


MODELS = [
    Model(name=f"projects/p/locations/l/models/{mid}", display_name=shown, labels=labels)
    for mid, shown, labels in (
        ("route-a", "route a", {"team": "vision"}),
        ("route-b", "route b", {"team": "speech", "run_id": "r2"}),
        ("123", "numbered", {}),
    )
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model=route-a", ["route-a"]),
        ('model!="route-a"', ["route-b", "123"]),
        ('displayName="route b"', ["route-b"]),
        ('display_name!="numbered" AND labels.team:*', ["route-a", "route-b"]),
        ("labels:run_id", ["route-b"]),
        ('labels.team="vision" OR model=123', ["route-a", "123"]),
    ],
)
def test_model_filter_grammar(text, expected):
    matches = parse_filter(text, MODEL_FIELDS)
    assert [m.name.rsplit("/", 1)[-1] for m in MODELS if matches(m)] == expected


@pytest.mark.parametrize(
    ("fields", "text", "message"),
    [
        (MODEL_FIELDS, 'display_name:"route*"', "supports the operators =, !="),
        (MODEL_FIELDS, 'state="JOB_STATE_FAILED"', "Supported: model, display_name, labels.KEY"),
        (VERSION_FIELDS, "model=route-a", "Supported: labels.KEY"),
        (JOB_FIELDS, 'displayName="x"', "Unsupported filter field"),
    ],
)
def test_model_filter_errors(fields, text, message):
    with pytest.raises(FilterError, match=re.escape(message)):
        parse_filter(text, fields)


def test_paging_in_order_walks_every_item_once_and_binds_its_token():
    items = list(range(5))
    first, token = page_in_order(items, request_text="f", page_size=2, page_token="", method="ListModels")
    second, token2 = page_in_order(items, request_text="f", page_size=2, page_token=token, method="ListModels")
    last, end = page_in_order(items, request_text="f", page_size=2, page_token=token2, method="ListModels")
    assert (first, second, last, end) == ([0, 1], [2, 3], [4], "")
    with pytest.raises(PageTokenError, match="different filter"):
        page_in_order(items, request_text="g", page_size=2, page_token=token, method="ListModels")
    with pytest.raises(PageTokenError, match="previous ListModels response"):
        page_in_order(items, request_text="f", page_size=2, page_token="junk", method="ListModels")


def test_paging_is_stable_when_jobs_are_added_between_pages():
    first, token = page(JOBS, filter_text="", page_size=2, page_token="")
    assert [j.display_name for j in first] == ['gamma "q"', "beta"]
    newer = [*JOBS, _job(4)]
    rest, last = page(newer, filter_text="", page_size=2, page_token=token)
    assert [j.display_name for j in rest] == ["alpha"] and last == ""
    with pytest.raises(PageTokenError):
        page(JOBS, filter_text="", page_size=-1, page_token="")


def _spec_job(*pools: dict, base: str | None = None) -> CustomJob:
    spec: dict[str, Any] = {"worker_pool_specs": list(pools)}
    if base:
        spec["base_output_directory"] = {"output_uri_prefix": base}
    return CustomJob(display_name="x", job_spec=spec)


POOL = {
    "machine_spec": {"machine_type": "n1-standard-4"},
    "replica_count": 1,
    "python_package_spec": {"executor_image_uri": "i", "python_module": "m"},
}


def test_single_replica_environment():
    job = _spec_job(POOL, base="gs://b/out/")
    env = replica_environment(job, job_id="7", project="p", slot=ReplicaSlot(0, 0), ports={"workerpool0-0": 1234})
    assert "TF_CONFIG" not in env
    assert (env["WORLD_SIZE"], env["RANK"], env["MASTER_PORT"]) == ("1", "0", "1234")
    assert env["AIP_MODEL_DIR"] == "gs://b/out/model/"
    assert json.loads(env["CLUSTER_SPEC"])["cluster"] == {"workerpool0": ["127.0.0.1:1234"]}


def test_evaluator_pool_has_no_node_rank_and_nproc_is_capped():
    gpu = {
        **POOL,
        "machine_spec": {
            "machine_type": "a2-highgpu-8g",
            "accelerator_type": "NVIDIA_TESLA_A100",
            "accelerator_count": 8,
        },
    }
    job = _spec_job(gpu, {}, {}, POOL)
    ports = {"workerpool0-0": 1, "workerpool3-0": 2}
    evaluator = replica_environment(job, job_id="7", project="p", slot=ReplicaSlot(3, 0), ports=ports)
    assert "RANK" not in evaluator and evaluator["WORLD_SIZE"] == "1"
    assert json.loads(evaluator["TF_CONFIG"])["task"] == {"type": "evaluator", "index": 0}
    assert "AIP_MODEL_DIR" not in evaluator
    primary = replica_environment(
        job, job_id="7", project="p", slot=ReplicaSlot(0, 0), ports=ports, max_nproc_per_node=2
    )
    assert primary["LANDFALL_NPROC_PER_NODE"] == "2"


@pytest.mark.parametrize(
    ("machine", "kind", "count", "ok"),
    [
        ("n1-standard-8", "NVIDIA_TESLA_V100", 1, True),
        ("n1-highmem-16", "NVIDIA_TESLA_V100", 1, False),
        ("n1-highmem-16", "NVIDIA_TESLA_V100", 2, True),
        ("n1-standard-96", "NVIDIA_TESLA_V100", 8, True),
        ("n1-standard-4", "NVIDIA_TESLA_P100", 8, False),
        ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8, True),
        ("a3-megagpu-8g", "NVIDIA_H100_80GB", 8, False),
        ("a2-highgpu-1g", None, 0, False),
        ("e2-standard-4", None, 0, True),
        ("e2-medium", None, 0, True),
    ],
)
def test_machine_shapes(machine, kind, count, ok):
    spec = {"machine_type": machine}
    if kind:
        spec.update(accelerator_type=kind, accelerator_count=count)
    errors = check_machine("p", WorkerPoolSpec(machine_spec=spec), load_catalog())
    assert (errors == []) == ok, errors


def test_quota_metric_names():
    catalog = load_catalog()
    prefix = "aiplatform.googleapis.com/custom_model_training_"
    assert catalog.quota_metric("NVIDIA_H100_80GB") == prefix + "nvidia_h100_gpus"
    assert catalog.quota_metric("NVIDIA_L4", preemptible=True) == prefix + "preemptible_nvidia_l4_gpus"
    assert catalog.quota_metric("") == prefix + "cpus"


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({"unavailable_calls": -1}, "unavailable_calls"),
        ({"unavailable_calls": True}, "unavailable_calls"),
        ({"stockout": {"region": "x"}}, "stockout must be a list"),
        ({"stockout": [{"zone": "x"}]}, "unknown key(s) zone"),
        ({"unsupported_machine_type": [{"region": "x"}]}, "missing machine_type"),
        ({"spot_preemption": {"times": 1}}, "missing after_seconds"),
        ({"spot_preemption": {"after_seconds": "1"}}, "after_seconds"),
        ({"job_timeout": {}}, "job_timeout: missing after_seconds"),
        ({"job_timeout": {"after_seconds": 0}}, "job_timeout.after_seconds must be > 0"),
        ({"job_timeout": {"after_seconds": 5, "times": 2}}, "unknown key(s) times"),
    ],
)
def test_bad_fault_plans(plan, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_rules(plan)


def test_exit_status_of_a_killed_replica_is_reported_like_a_container():
    assert [exit_status(code) for code in (0, 3, -9, -15)] == [0, 3, 137, 143]


def test_replica_log_paths_in_replica_order(tmp_path):
    folder = tmp_path / "jobs" / "42"
    folder.mkdir(parents=True)
    for name in ("workerpool1-10", "workerpool1-2", "workerpool0-0", "job"):
        (folder / f"{name}.log").write_text("")
    assert list(replica_log_paths(tmp_path, "42")) == ["workerpool0-0", "workerpool1-2", "workerpool1-10"]
    assert replica_log_paths(tmp_path, "43") == {}


def test_rate_limits_take_model_service_methods():
    rules = parse_rules({"rate_limits": [{"method": "UploadModel", "limit": 1}, {"method": "GetModel", "limit": 9}]})
    assert [rule.method for rule in rules.rate_limits] == ["UploadModel", "GetModel"]
    assert rate_quota("UploadModel").metric_title == "Job or LRO submission requests"
    assert rate_quota("GetModel").metric_title == "Resource management (CRUD) requests"
    with pytest.raises(ConfigError, match="UploadModel"):
        parse_rules({"rate_limits": [{"method": "Predict", "limit": 1}]})


def test_calls_are_counted_per_minute_refused_apart_and_old_minutes_dropped():
    plan = FaultPlan()
    plan.replace({"rate_limits": [{"method": "CreateCustomJob", "limit": 2}]})
    minute = 29_000_000 * 60
    for second in (0, 10, 20, 61):  # the third call in the window is refused; the fourth is in the next minute
        plan.take_rate("CreateCustomJob", "r1", now=float(second), wall=minute + second)
    plan.take_rate("GetCustomJob", "r1", now=62.0, wall=minute + 62)
    assert plan.per_minute() == {
        "CreateCustomJob r1": {str(minute): {"calls": 2, "refused": 1}, str(minute + 60): {"calls": 1, "refused": 0}},
        "GetCustomJob r1": {str(minute + 60): {"calls": 1, "refused": 0}},
    }
    later = minute + (MINUTES_KEPT + 1) * 60  # both earlier minutes are past the last MINUTES_KEPT
    plan.take_rate("GetCustomJob", "r1", now=1e6, wall=later)
    assert plan.per_minute() == {"GetCustomJob r1": {str(later): {"calls": 1, "refused": 0}}}


@pytest.mark.parametrize(
    ("alias", "valid"),
    [
        ("production", True),
        ("v2-candidate", True),
        ("aBc", True),
        ("aB", False),
        ("p", False),
        ("7", False),
        ("prod-", False),
    ],
)
def test_alias_format_is_vertex_s(alias, valid):
    assert (ALIAS.fullmatch(alias) is not None) == valid
