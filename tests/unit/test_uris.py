"""Image references and gs:// URIs are parsed by their grammar and compared by their parts (schemas/uris.py): every
form that escaped the text-prefix checks (`..`, its percent-escape, a space, a bucket taken as the text before the
first '/') is refused naming the rule, and an allowed place holds only what lies under it component by component."""

from __future__ import annotations

import pytest

from schemas.errors import SchemaError
from schemas.uris import GcsUri, ImageRef, parse_gcs_uri, parse_image, parse_image_place

PREBUILT = "us-docker.pkg.dev/vertex-ai/training"
DIGEST = "sha256:" + "ab" * 32

AR = "us-central1-docker.pkg.dev"
IMAGES_READ = [  # reference -> (host, path, tag, digest)
    (f"{PREBUILT}/pytorch-gpu:latest", ("us-docker.pkg.dev", ("vertex-ai", "training", "pytorch-gpu"), "latest", "")),
    (f"{AR}/acme/landfall/team-nlp@{DIGEST}", (AR, ("acme", "landfall", "team-nlp"), "", DIGEST)),
    ("localhost:5000/team/img:1", ("localhost:5000", ("team", "img"), "1", "")),
    ("Registry.Example.COM/team/img", ("registry.example.com", ("team", "img"), "", "")),
    ("someone/miner:1", ("docker.io", ("someone", "miner"), "1", "")),
    ("ubuntu", ("docker.io", ("library", "ubuntu"), "", "")),
    ("index.docker.io/someone/miner", ("docker.io", ("someone", "miner"), "", "")),
    ("host.io/a__b/c-d/e.f_g:v1.2-rc_3", ("host.io", ("a__b", "c-d", "e.f_g"), "v1.2-rc_3", "")),
]  # fmt: skip

IMAGES_REFUSED = [  # reference -> the rule its refusal names
    (f"{PREBUILT}/../../evil-project/miner:1", "'.' or '..' path component"),
    (f"{PREBUILT}/%2e%2e/%2e%2e/evil-project/miner:1", "percent-escape"),
    (f"{PREBUILT}/%2E%2E/evil/miner:1", "percent-escape"),
    (f"{PREBUILT}/pytorch:1 --privileged", "space"),
    (f"{PREBUILT}/ pytorch:1", "space"),
    (f"{PREBUILT}/pytorch:1\n", "control character"),
    (f"{PREBUILT}/pytorch:1\t", "space"),
    (f"{PREBUILT}/./pytorch:1", "'.' or '..' path component"),
    (f"{PREBUILT}//pytorch:1", "empty path component"),
    (f"{PREBUILT}/", "empty path component"),
    (f"/{PREBUILT}/pytorch", "empty path component"),
    (f"{PREBUILT}/..:1", "'.' or '..' path component"),
    (f"{PREBUILT}/a..b:1", "outside Docker's grammar"),
    (f"{PREBUILT}/Pytorch:1", "outside Docker's grammar"),
    (f"{PREBUILT}/py\\..\\torch:1", "outside Docker's grammar"),
    (f"{PREBUILT}/-pytorch:1", "outside Docker's grammar"),
    (f"{PREBUILT}/pytorch:-1", "is not a tag"),
    (f"{PREBUILT}/pytorch@sha256:abc", "is not a digest"),
    ("https://us-docker.pkg.dev/vertex-ai/training/pytorch", "is a URL"),
    ("evil_host.io:x/img", "is not a registry host"),
    ("", "is empty"),
    ("host.io/" + "a" * 260, "longer than Docker's 255"),
]

WITHIN = [  # (image, place, lies there)
    (f"{PREBUILT}/pytorch-gpu:1", f"{PREBUILT}/", True),
    (f"{PREBUILT}/deeper/pytorch-gpu:1", f"{PREBUILT}/", True),
    ("US-DOCKER.PKG.DEV/vertex-ai/training/pytorch-gpu:1", f"{PREBUILT}/", True),  # a host is case-insensitive
    ("us-docker.pkg.dev/vertex-ai/trainingx/pytorch:1", f"{PREBUILT}/", False),
    ("us-docker.pkg.dev/vertex-ai/pytorch:1", f"{PREBUILT}/", False),
    ("us-docker.pkg.dev.evil.io/vertex-ai/training/pytorch:1", f"{PREBUILT}/", False),
    ("us-docker.pkg.dev:443/vertex-ai/training/pytorch:1", f"{PREBUILT}/", False),
    ("eu-docker.pkg.dev/vertex-ai/training/pytorch:1", f"{PREBUILT}/", False),
    (PREBUILT, f"{PREBUILT}/", False),  # the folder itself is not an image in it
    ("host.io/team/img:2", "host.io/team/img", True),  # a place naming one image: that image, any tag
    ("host.io/team/img2:1", "host.io/team/img", False),
    ("ubuntu:24.04", "docker.io/library/", True),
    ("someone/miner:1", "docker.io/library/", False),
]


@pytest.mark.parametrize(("text", "parts"), IMAGES_READ, ids=[t for t, _ in IMAGES_READ])
def test_an_image_reference_is_read_into_its_parts(text: str, parts: tuple[str, tuple[str, ...], str, str]) -> None:
    host, path, tag, digest = parts
    assert parse_image(text, "trainer.image_uri") == ImageRef(host=host, path=path, tag=tag, digest=digest)


@pytest.mark.parametrize(("text", "rule"), IMAGES_REFUSED, ids=[repr(t)[:60] for t, _ in IMAGES_REFUSED])
def test_an_image_reference_outside_docker_s_grammar_is_refused_naming_the_rule(text: str, rule: str) -> None:
    with pytest.raises(SchemaError) as caught:
        parse_image(text, "trainer.image_uri")
    assert caught.value.field == "trainer.image_uri" and rule in str(caught.value)


@pytest.mark.parametrize(("image", "place", "inside"), WITHIN)
def test_a_place_holds_only_the_images_under_it_component_by_component(image: str, place: str, inside: bool) -> None:
    assert parse_image(image, "trainer.image_uri").within(parse_image_place(place, "SETTING")) is inside


@pytest.mark.parametrize("place", ["a/", "ubuntu", f"{PREBUILT}/x:1", f"{PREBUILT}/../", f"{PREBUILT} /", "x.io"])
def test_a_place_that_is_not_host_and_path_is_refused(place: str) -> None:
    with pytest.raises(SchemaError) as caught:
        parse_image_place(place, "SETTING")
    assert caught.value.field == "SETTING"


OBJECTS_READ = [
    ("gs://landfall-code/scripts/0123abcd/train.py", GcsUri("landfall-code", "scripts/0123abcd/train.py")),
    ("gs://landfall-code/a b/train v2.py", GcsUri("landfall-code", "a b/train v2.py")),
    ("gs://my.bucket_1/x.whl", GcsUri("my.bucket_1", "x.whl")),
    ("gs://landfall-code/a...b/x.py", GcsUri("landfall-code", "a...b/x.py")),
]

OBJECTS_REFUSED = [  # (uri, rule)
    ("gs://landfall-code/../landfall-landing/datasets/evil.py", "'.' or '..' segment"),
    ("gs://landfall-code/a/../../landfall-landing/evil.py", "'.' or '..' segment"),
    ("gs://landfall-code/./evil.py", "'.' or '..' segment"),
    ("gs://landfall-code/%2e%2e/landfall-landing/evil.py", "percent-escape"),
    ("gs://landfall-code/%2E%2E/landfall-landing/evil.py", "percent-escape"),
    ("gs://landfall-code/..%2flandfall-landing%2fevil.py", "percent-escape"),
    ("gs://landfall-code/%252e%252e/evil.py", "percent-escape"),
    ("gs://landfall-code/a%5c..%5cevil.py", "percent-escape"),
    ("gs://landfall-code//landfall-landing/evil.py", "empty segment"),
    ("gs://landfall-code/a//evil.py", "empty segment"),
    ("gs://landfall-code/scripts/", "empty segment"),
    ("gs://landfall-code/a\\..\\evil.py", "backslash"),
    ("gs://landfall-code/evil.py\n", "control character"),
    ("gs://landfall-code/", "names a bucket, not an object"),
    ("gs://landfall-code", "names a bucket, not an object"),
    ("gs://Landfall-Code/evil.py", "is not a bucket name"),
    ("gs://landfall-code..x/evil.py", "is not a bucket name"),
    ("gs://-landfall-code/evil.py", "is not a bucket name"),
    ("gs:///evil.py", "is not a bucket name"),
    ("s3://landfall-code/evil.py", "is not a gs://BUCKET/PATH URI"),
    ("gs:/landfall-code/evil.py", "is not a gs://BUCKET/PATH URI"),
    ("/gcs/landfall-code/evil.py", "is not a gs://BUCKET/PATH URI"),
]

FOLDERS = [  # (uri, the rule its refusal names; "" = read)
    ("gs://landfall-landing/", ""),
    ("gs://landfall-landing/datasets/d/", ""),
    ("gs://landfall-landing/datasets/date=2026-11-22%2012%3A00/", ""),  # Hive-style escapes stay as written
    ("gs://landfall-landing/../landfall-code/", "'.' or '..' segment"),
    ("gs://landfall-landing/datasets/../../landfall-code/", "'.' or '..' segment"),
    ("gs://landfall-landing/datasets/%2e%2e/", "percent-escape"),
    ("gs://landfall-landing/datasets//d/", "empty segment"),
    ("gs://landfall-landing//", "empty segment"),
]


@pytest.mark.parametrize(("text", "parsed"), OBJECTS_READ)
def test_a_gs_object_uri_is_read_into_bucket_and_name(text: str, parsed: GcsUri) -> None:
    assert parse_gcs_uri(text, "trainer.script") == parsed


@pytest.mark.parametrize(("text", "rule"), OBJECTS_REFUSED, ids=[repr(t)[:60] for t, _ in OBJECTS_REFUSED])
def test_a_gs_object_uri_that_could_name_another_place_is_refused_naming_the_rule(text: str, rule: str) -> None:
    with pytest.raises(SchemaError) as caught:
        parse_gcs_uri(text, "trainer.script")
    assert caught.value.field == "trainer.script" and rule in str(caught.value)


@pytest.mark.parametrize(("text", "rule"), FOLDERS)
def test_a_dataset_folder_is_a_bucket_and_a_prefix_of_real_segments(text: str, rule: str) -> None:
    if not rule:
        assert parse_gcs_uri(text, "dataset.uri", folder=True).bucket == "landfall-landing"
        return
    with pytest.raises(SchemaError) as caught:
        parse_gcs_uri(text, "dataset.uri", folder=True)
    assert caught.value.field == "dataset.uri" and rule in str(caught.value)
