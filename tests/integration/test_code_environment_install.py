"""A team's requirements resolve at the image's installed versions (uv with the image as constraints), the line
REPLACE_LINE installs over the image with a warning on the run, and the installed versions are recorded. uv runs
offline against a folder of wheels built here (no index, no network)."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from schemas.run_metrics import run_warnings
from trainer import image_packages, user_code
from trainer.image_packages import REPLACE_LINE
from trainer.user_code import UserCode


def _wheel(folder: Path, name: str, version: str) -> None:
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for n, text in files.items():
            whl.writestr(n, text)


@pytest.fixture
def offline_wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0", "2.0"):
        _wheel(wheels, "lfdemo", version)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_FIND_LINKS", str(wheels))
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    # the image holds lfdemo 1.0 (as it holds torch): the constraints pin it
    monkeypatch.setattr(image_packages, "image", lambda: {**image_packages.installed(), "lfdemo": "1.0"})
    return wheels


def _version(python: str) -> str:
    done = subprocess.run([python, "-c", "import lfdemo; print(lfdemo.VERSION)"], capture_output=True, text=True)
    return done.stdout.strip()


def test_requirements_resolve_at_the_image_versions_and_are_recorded(offline_wheels: Path, tmp_path: Path) -> None:
    # packaging is the image's own (as torch is): satisfied from the image with no index to download it from
    code = UserCode(form="script", script="gs://landfall-code/t.py", requirements=("lfdemo", "packaging"))
    python = user_code.install(code, [], tmp_path / "envs")
    assert _version(python) == "1.0", "the newest (2.0) would be chosen without the image's constraints"
    image = image_packages.installed()["packaging"]
    assert user_code.environment_facts(python) == {"packages": {"lfdemo": "1.0", "packaging": image}, "warnings": []}


def test_the_replace_line_installs_over_the_image_with_a_warning(offline_wheels: Path, tmp_path: Path) -> None:
    code = UserCode(form="script", script="gs://landfall-code/t.py", requirements=("lfdemo>=2", REPLACE_LINE))
    python = user_code.install(code, [], tmp_path / "envs")
    assert _version(python) == "2.0"
    facts = user_code.environment_facts(python)
    assert facts["packages"] == {"lfdemo": "2.0"}
    (warning,) = run_warnings(facts)
    assert warning.code == "image-packages-replaced" and "lfdemo 1.0" in warning.message
