"""The trainer images' manifest (deploy/topology.toml [[trainer_image.builds]]), the Dockerfile that builds
each from it, the settings that name them and the GPUs' compute capabilities (schemas/data/gpus.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.images import ImageError, assumed_capabilities, trainer_image
from deploy.topology import TOPOLOGY_FILE
from functions.settings import SettingsError, settings_from_env
from schemas.gpus import load_gpus, runs_on

DOCKERFILE = Path(trainer_image().dockerfile)
BASE_ENV = {"GOOGLE_CLOUD_PROJECT": "p", "LANDFALL_TRAINER_IMAGE": "us-central1-docker.pkg.dev/p/landfall/trainer:t1"}


def test_every_gpu_in_the_catalog_runs_on_some_build_and_b200_only_on_cuda_13() -> None:
    image = trainer_image()
    for kind, gpu in load_gpus().kinds.items():
        build = image.build_for(gpu.compute_capability)
        assert build is not None, f"no build carries kernels for {kind} ({gpu.compute_capability})"
    b200 = image.build_for(load_gpus().kinds["NVIDIA_B200"].compute_capability)
    assert b200 is not None and b200.cuda.startswith("13.")
    assert image.build_for(load_gpus().kinds["NVIDIA_H100_80GB"].compute_capability) == image.builds[0]


@pytest.mark.parametrize(
    ("gpu", "carried", "runs"),
    [
        ("8.9", ("8.0", "8.6"), True),  # L4 runs sm_86 kernels: same major, lower minor
        ("8.0", ("8.6",), False),  # not the other way
        ("10.0", ("9.0",), False),  # never across majors
        ("6.1", ("6.0",), True),  # P4 on sm_60
    ],
)
def test_kernels_run_within_a_major_on_equal_or_newer_minors(gpu: str, carried: tuple[str, ...], runs: bool) -> None:
    assert runs_on(gpu, carried) is runs


def test_the_dockerfile_defaults_are_the_first_build_and_it_checks_and_installs_what_the_manifest_says() -> None:
    text = DOCKERFILE.read_text()
    first = trainer_image().builds[0]
    assert f"ARG BASE_IMAGE={first.base_image}\n" in text
    assert f'ARG COMPUTE_CAPABILITIES="{" ".join(first.compute_capabilities)}"\n' in text
    assert "torch._C._cuda_getArchFlags()" in text, "the build fails where torch lacks a promised capability"
    assert "apt-get install -y --no-install-recommends google-reduction-server" in text
    assert "packages.cloud.google.com/apt google-fast-socket main" in text


def test_a_broken_manifest_is_refused_naming_the_entry(tmp_path: Path) -> None:
    text = TOPOLOGY_FILE.read_text()
    broken = tmp_path / "topology.toml"
    broken.write_text(text.replace('compute_capabilities = ["7.5", "8.0"', 'compute_capabilities = ["sm_75", "8.0"', 1))
    with pytest.raises(ImageError, match=r"trainer_image.builds\[1\].compute_capabilities"):
        trainer_image(broken)
    none = tmp_path / "none.toml"
    start, end = text.index("[[trainer_image.builds]]"), text.index("\n[gcp]")
    none.write_text(text[:start] + text[end:])
    with pytest.raises(ImageError, match="must list at least one build"):
        trainer_image(none)


def test_a_team_image_without_declared_capabilities_gets_those_of_the_cuda_line_it_names() -> None:
    first, cu13 = trainer_image().builds[0], trainer_image().build_named("trainer-cu130")
    assert assumed_capabilities("nvcr.io/nvidia/pytorch:25.01-cuda13.0")[1] == cu13.compute_capabilities
    assert assumed_capabilities("x/team:cu121")[1] == first.compute_capabilities
    words, caps = assumed_capabilities("x/team:latest")
    assert caps == first.compute_capabilities and "names no CUDA version" in words
    words, caps = assumed_capabilities("x/team:cuda11.8")
    assert caps == first.compute_capabilities and "names CUDA 11, a line Landfall does not build" in words


def test_settings_name_each_build_next_to_the_trainer_image() -> None:
    settings = settings_from_env(BASE_ENV)
    assert (
        settings.trainer_image_for("us-central1", "trainer-cu130")
        == "us-central1-docker.pkg.dev/p/landfall/trainer-cu130:t1"
    )
    assert settings.trainer_image_for("us-central1") == BASE_ENV["LANDFALL_TRAINER_IMAGE"], "unchanged meaning"
    own = settings_from_env({**BASE_ENV, "LANDFALL_TRAINER_IMAGES": "trainer-cu130=eu.gcr.io/p/b200:9"})
    assert own.trainer_image_for("asia-east1", "trainer-cu130") == "eu.gcr.io/p/b200:9"
    with pytest.raises(SettingsError, match="BUILD one of trainer, trainer-cu130"):
        settings_from_env({**BASE_ENV, "LANDFALL_TRAINER_IMAGES": "cu999=x"})
