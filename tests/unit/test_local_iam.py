"""The local stack's IAM model: a grant's gcloud condition read back as its CEL expression and evaluated as IAM
evaluates it (object names, the listed prefix), and each Cloud Storage JSON API call mapped to the permission Cloud
Storage checks for it."""

from __future__ import annotations

import json

import pytest

from deploy.gcp.iam import Resource
from deploy.local_iam.policy import (
    Binding,
    Policy,
    Target,
    condition_expression,
    condition_holds,
    role_permissions,
)
from deploy.local_iam.storage_gate import Need, forbidden_body, needs, upload_name

TEAM = (
    'resource.name.startsWith("projects/_/buckets/land/objects/teams/a/") || '
    'api.getAttribute("storage.googleapis.com/objectListPrefix", "").startsWith("teams/a/")'
)


def test_a_condition_flag_gives_back_its_expression_with_either_delimiter() -> None:
    assert condition_expression("") == ""
    assert condition_expression('expression=resource.name=="x",title=t,description=d') == 'resource.name=="x"'
    assert condition_expression(f"^;^expression={TEAM};title=t;description=d, with a comma") == TEAM
    with pytest.raises(ValueError, match="title"):
        condition_expression("expression=x")


@pytest.mark.parametrize(
    ("target", "holds"),
    [
        (Target("land", "teams/a/part-0.csv"), True),
        (Target("land", "teams/b/part-0.csv"), False),
        (Target("land", "teams/ab/part-0.csv"), False),
        (Target("land", None, "teams/a/"), True),
        (Target("land", None, "teams/a/sub/"), True),
        (Target("land", None, "teams/"), False),
        (Target("land", None, ""), False),
        (Target("other", "teams/a/x"), False),
    ],
)
def test_a_prefix_condition_holds_on_its_objects_and_lists_only(target: Target, holds: bool) -> None:
    assert condition_holds(TEAM, target) is holds


def test_an_expression_that_cannot_be_evaluated_is_false() -> None:
    assert condition_holds("resource.nam.startsWith(1)", Target("land", "x")) is False


def test_a_policy_allows_what_a_binding_holds_and_names_the_binding() -> None:
    viewer = Binding("serviceAccount:a@p", "roles/storage.objectViewer", Resource("bucket", "land"))
    team = Binding("serviceAccount:t@p", "roles/storage.objectUser", Resource("bucket", "land"), TEAM)
    policy = Policy("p", (viewer, team))
    assert policy.check("serviceAccount:a@p", "storage.objects.get", Target("land", "x")).binding == viewer
    assert not policy.check("serviceAccount:a@p", "storage.objects.create", Target("land", "x")).allowed
    assert not policy.check("serviceAccount:a@p", "storage.objects.get", Target("elsewhere", "x")).allowed
    assert policy.check("serviceAccount:t@p", "storage.objects.delete", Target("land", "teams/a/x")).allowed
    assert not policy.check("serviceAccount:t@p", "storage.objects.delete", Target("land", "teams/b/x")).allowed
    widened = policy.granted_alike("land", ("land", "more"))
    assert widened.check("serviceAccount:a@p", "storage.objects.get", Target("more", "x")).allowed
    assert not widened.check("serviceAccount:t@p", "storage.objects.get", Target("more", "teams/a/x")).allowed


def test_roles_hold_their_documented_storage_permissions() -> None:
    roles = role_permissions()
    assert "storage.objects.create" not in roles["roles/storage.objectViewer"]
    assert "storage.objects.delete" not in roles["roles/storage.objectCreator"]
    assert {"storage.objects.create", "storage.objects.delete"} <= roles["roles/storage.objectUser"]
    assert "storage.buckets.get" not in roles["roles/storage.objectUser"]


def test_each_call_needs_the_permission_cloud_storage_checks() -> None:
    assert needs("GET", "/storage/v1/b/land/o?prefix=teams%2Fa%2F&maxResults=5", {}, None) == [
        Need("storage.objects.list", Target("land", None, "teams/a/"), on_object=False)
    ]
    assert needs("GET", "/download/storage/v1/b/land/o/teams%2Fa%2Fx.csv?alt=media", {}, None) == [
        Need("storage.objects.get", Target("land", "teams/a/x.csv"))
    ]
    assert needs("DELETE", "/storage/v1/b/land/o/x", {}, None) == [Need("storage.objects.delete", Target("land", "x"))]
    created = needs("POST", "/upload/storage/v1/b/land/o?uploadType=media&name=a%2Fb&ifGenerationMatch=0", {}, None)
    assert created == [Need("storage.objects.create", Target("land", "a/b"), on_object=False)]
    copy = needs("POST", "/storage/v1/b/land/o/a/rewriteTo/b/art/o/b", {}, None)
    assert copy == [
        Need("storage.objects.get", Target("land", "a")),
        Need("storage.objects.create", Target("art", "b")),
    ]
    assert needs("GET", "/storage/v1/b/land", {}, None) == [
        Need("storage.buckets.get", Target("land"), on_object=False)
    ]
    assert needs("POST", "/storage/v1/b/land/o/a/acl", {}, None) is None


def test_an_uploads_name_comes_from_its_query_or_its_metadata() -> None:
    boundary = "b0undary"
    body = (
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
        + json.dumps({"name": "runs/r1/model.pt"})
        + f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\nweights\r\n--{boundary}--\r\n"
    ).encode()
    multipart = {"Content-Type": f'multipart/related; boundary="{boundary}"'}
    assert upload_name("/upload/storage/v1/b/art/o?uploadType=multipart", multipart, body) == "runs/r1/model.pt"
    resumable = json.dumps({"name": "big.bin"}).encode()
    assert upload_name("/upload/storage/v1/b/art/o?uploadType=resumable", {}, resumable) == "big.bin"
    assert upload_name("/upload/storage/v1/b/art/o?uploadType=media&name=q", {}, None) == "q"
    assert upload_name("/upload/storage/v1/b/art/o?uploadType=media", {}, b"not json") is None


def test_a_refusal_is_cloud_storages_403_body() -> None:
    error = json.loads(forbidden_body("no"))["error"]
    assert (error["code"], error["errors"][0]["reason"]) == (403, "forbidden")


def test_the_admin_role_holds_every_object_permission_the_object_roles_hold() -> None:
    roles = role_permissions()
    for role in ("roles/storage.objectViewer", "roles/storage.objectCreator", "roles/storage.objectUser"):
        assert roles[role] <= roles["roles/storage.objectAdmin"], role
    assert roles["roles/storage.objectAdmin"] <= roles["roles/storage.admin"]


def test_a_compose_needs_get_on_its_sources_and_a_layout_is_listed_under_its_prefix() -> None:
    body = json.dumps({"sourceObjects": [{"name": "runs/b/x"}, {"name": "runs/a/y"}]}).encode()
    assert needs("POST", "/storage/v1/b/art/o/runs%2Fa%2Fz/compose", {}, body) == [
        Need("storage.objects.get", Target("art", "runs/b/x")),
        Need("storage.objects.get", Target("art", "runs/a/y")),
        Need("storage.objects.create", Target("art", "runs/a/z")),
    ]
    assert needs("POST", "/storage/v1/b/art/o/z/compose", {}, b"{}") is None
    assert needs("GET", "/storage/v1/b/land/storageLayout?prefix=teams%2Fa%2F", {}, None) == [
        Need("storage.objects.list", Target("land", None, "teams/a/"), on_object=False)
    ]


def test_an_upload_whose_name_or_bucket_could_mean_two_objects_is_not_mapped() -> None:
    both = json.dumps({"name": "runs/b/x"}).encode()
    assert upload_name("/upload/storage/v1/b/art/o?uploadType=resumable&name=runs/a/x", {}, both, "art") is None
    elsewhere = json.dumps({"name": "x", "bucket": "land"}).encode()
    assert upload_name("/upload/storage/v1/b/art/o?uploadType=resumable", {}, elsewhere, "art") is None
    assert needs("POST", "/upload/storage/v1/b/art/o?uploadType=media&name=a&name=b", {}, None) == [
        Need("storage.objects.create", Target("art", "a"))
    ]
