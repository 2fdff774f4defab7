"""ListCustomJobs through the client: the documented filter grammar and paging."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.api_core.exceptions import InvalidArgument

from .harness import PROJECT, probe_job, probe_pool

PARENT = f"projects/{PROJECT}/locations/europe-west4"


@pytest.fixture(scope="module")
def listed_jobs(emulator, tmp_path_factory):
    """Five ended jobs in their own region: a, b (failed), c with labels; d, e created after a checkpoint time."""
    out: Path = tmp_path_factory.mktemp("listing")
    batch = uuid.uuid4().hex[:6]
    specs = {
        "a": ([probe_pool(out)], {"batch": batch, "team": "alpha"}),
        "b": ([probe_pool(out, "--exit", "2")], {"batch": batch, "team": "beta"}),
        "c": ([probe_pool(out)], {"batch": batch}),
    }
    jobs = {}
    for key, (pools, labels) in specs.items():
        jobs[key] = emulator.client.create_custom_job(
            parent=PARENT, custom_job=probe_job(pools, display_name=f"list-{batch}-{key}", labels=labels)
        )
    checkpoint = datetime.now(UTC)
    for key in ("d", "e"):
        jobs[key] = emulator.client.create_custom_job(
            parent=PARENT,
            custom_job=probe_job([probe_pool(out)], display_name=f"late-{batch}-{key}", labels={"batch": batch}),
        )
    for job in jobs.values():
        emulator.wait_terminal(job.name)
    return batch, checkpoint, {key: job.name for key, job in jobs.items()}


def _names(emulator, listed_jobs, text: str) -> set[str]:
    batch, _, names = listed_jobs
    request = {"parent": PARENT, "filter": f'labels.batch="{batch}" AND ({text})' if text else f"labels.batch={batch}"}
    found = {job.name for job in emulator.client.list_custom_jobs(request=request)}
    return {key for key, name in names.items() if name in found}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {"a", "b", "c", "d", "e"}),
        ('labels.team="alpha"', {"a"}),
        ("labels.team:*", {"a", "b"}),
        ("NOT labels.team:*", {"c", "d", "e"}),
        ('labels.team!="alpha"', {"b", "c", "d", "e"}),
        ('state="JOB_STATE_FAILED"', {"b"}),
        ('state!="JOB_STATE_FAILED"', {"a", "c", "d", "e"}),
        ('display_name:"late-*"', {"d", "e"}),
        ('labels.team="alpha" OR labels.team="beta"', {"a", "b"}),
        ('state="JOB_STATE_SUCCEEDED" AND display_name:"list-*"', {"a", "c"}),
        ('NOT (labels.team="alpha" OR display_name:"late-*")', {"b", "c"}),
    ],
)
def test_filter(emulator, listed_jobs, text, expected):
    assert _names(emulator, listed_jobs, text) == expected


def test_filter_by_display_name_and_create_time(emulator, listed_jobs):
    batch, checkpoint, _ = listed_jobs
    stamp = checkpoint.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert _names(emulator, listed_jobs, f'display_name="list-{batch}-c"') == {"c"}
    assert _names(emulator, listed_jobs, f'create_time>"{stamp}"') == {"d", "e"}
    assert _names(emulator, listed_jobs, f'create_time<="{stamp}"') == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('encryption_spec="x"', "Unsupported filter field"),
        ('state>"JOB_STATE_FAILED"', "supports the operators"),
        ('state="RUNNING"', "Unknown state"),
        ('create_time>"yesterday"', "RFC 3339"),
        ('labels.team="alpha" AND', "ends too early"),
        ('(labels.team="alpha"', "ends too early"),
    ],
)
def test_bad_filter_is_invalid_argument(emulator, text, message):
    with pytest.raises(InvalidArgument, match=message):
        emulator.client.list_custom_jobs(request={"parent": PARENT, "filter": text})


def test_paging_walks_every_job_once_newest_first(emulator, listed_jobs):
    batch, _, names = listed_jobs
    request = {"parent": PARENT, "filter": f"labels.batch={batch}", "page_size": 2}
    first = emulator.client.list_custom_jobs(request=request)
    pages = list(first.pages)
    assert [len(p.custom_jobs) for p in pages] == [2, 2, 1]
    assert pages[-1].next_page_token == ""
    order = [job.name for p in pages for job in p.custom_jobs]
    assert order == [names[key] for key in ("e", "d", "c", "b", "a")]


def test_page_token_is_bound_to_its_filter(emulator, listed_jobs):
    batch, _, _ = listed_jobs
    request = {"parent": PARENT, "filter": f"labels.batch={batch}", "page_size": 2}
    token = next(iter(emulator.client.list_custom_jobs(request=request).pages)).next_page_token
    assert token
    with pytest.raises(InvalidArgument, match="different filter"):
        emulator.client.list_custom_jobs(request={"parent": PARENT, "page_size": 2, "page_token": token})
    with pytest.raises(InvalidArgument, match="Invalid page_token"):
        emulator.client.list_custom_jobs(request={"parent": PARENT, "page_token": "not-a-token"})
