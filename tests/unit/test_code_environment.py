"""A team's requirements install over the image's packages, never in place of them unless asked
(trainer/image_packages.py): a conflict stops the run naming both versions before anything is installed, and the
environment cache keeps its bound. The installs themselves: tests/integration/test_code_environment_install.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from trainer import image_packages, user_code
from trainer.image_packages import REPLACE_LINE, conflicts, refusal
from trainer.user_code import InstallError, UserCode


def test_a_requirement_that_excludes_the_image_version_is_a_conflict_naming_both() -> None:
    image = {"torch": "2.5.1", "numpy": "2.1.0"}
    assert conflicts(["torch", "numpy>=2", "pandas==2.2.3"], image) == []
    assert conflicts(['torch>=2.6; python_version < "3"'], image) == [], "a marker that does not apply"
    found = conflicts(["Torch>=2.6", "numpy<2"], image)
    assert [(c.name, c.image_version) for c in found] == [("torch", "2.5.1"), ("numpy", "2.1.0")]
    message = refusal(found)
    assert "'Torch>=2.6' excludes the image's torch 2.5.1" in message
    assert "torch==2.5.1" in message and REPLACE_LINE in message


def test_a_conflict_stops_before_anything_is_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"nothing may run for a conflict: {args}")

    monkeypatch.setattr(subprocess, "run", never)
    monkeypatch.setattr(image_packages, "image", lambda: {"torch": "2.5.1"})
    code = UserCode(form="script", script="gs://landfall-code/t.py", requirements=("torch==2.6.0",))
    with pytest.raises(InstallError, match=r"'torch==2.6.0' excludes the image's torch 2.5.1"):
        user_code.install(code, [], tmp_path / "envs")


def test_the_cache_keeps_its_bound_removing_the_least_recently_used(tmp_path: Path) -> None:
    cache = tmp_path / "envs"
    for i, name in enumerate(["old", "used", "new"]):
        (cache / name).mkdir(parents=True)
        ready = cache / name / ".landfall-ready"
        ready.write_text("ok")
        os.utime(ready, ns=(i * 10**9, i * 10**9))
    os.utime(cache / "used" / ".landfall-ready", ns=(10**11, 10**11))  # touched by a later run
    user_code._evict(cache, keep="new", most=2)
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == ["new", "used"]
    with pytest.raises(Exception, match="LANDFALL_CODE_ENV_CACHE_MAX='0'"):
        user_code._cache_max({"LANDFALL_CODE_ENV_CACHE_MAX": "0"})
