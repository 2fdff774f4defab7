"""trainer.requirements holds package specifiers only: options, URLs, paths, archives and editable installs are
refused with the line named, at parse time and again in the trainer, which also puts every line after `--`."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from schemas.errors import SchemaError
from schemas.requirement_lines import ALLOWED, check_requirements, requirement_problem
from schemas.training_request import parse_training_request
from trainer import user_code
from trainer.user_code import InstallError, UserCode

ACCEPTED = [
    "numpy",
    "pandas==2.2.3",
    "torchmetrics[image]>=1.4,<2",
    'tomli; python_version < "3.11"',
    "scikit-learn~=1.5",
    "  sentencepiece == 0.2.0  ",
]

REFUSED = [  # line -> what its refusal says it is
    ("--target=/some/host/folder", "installer option"),
    ("--index-url https://evil.example/simple", "installer option"),
    ("--extra-index-url=https://evil.example/simple", "installer option"),
    ("-i https://evil.example/simple", "installer option"),
    ("-r other-requirements.txt", "installer option"),
    ("-c constraints.txt", "installer option"),
    ("-e .", "installer option"),
    ("--editable=git+https://github.com/x/y", "installer option"),
    ("--pre", "installer option"),
    ("https://evil.example/pkg-1.0-py3-none-any.whl", "URL or a path"),
    ("git+https://github.com/x/y", "URL or a path"),
    ("file:///etc/passwd", "URL or a path"),
    ("./local_pkg", "URL or a path"),
    ("/abs/path/pkg", "URL or a path"),
    ("~/pkg", "URL or a path"),
    ("pkg @ https://evil.example/pkg.whl", "names a URL"),
    ("pkg @ file:///tmp/pkg", "names a URL"),
    ("pkg-1.0-py3-none-any.whl", "archive file"),
    ("evil-1.0.tar.gz", "archive file"),
    ("numpy\n--target=/x", "line break"),
    ("numpy --hash=sha256:00", "not a package specifier"),
    ("numpy; os.system('x')", "not a package specifier"),
    ("", "is empty"),
    ("x" * 600, "longer than"),
]


@pytest.mark.parametrize("line", ACCEPTED)
def test_a_package_specifier_is_a_requirement_line(line: str) -> None:
    assert requirement_problem(line) is None


@pytest.mark.parametrize(("line", "what"), REFUSED, ids=[repr(line)[:50] for line, _ in REFUSED])
def test_anything_else_is_refused_saying_what_it_is(line: str, what: str) -> None:
    problem = requirement_problem(line)
    assert problem is not None and what in problem


def test_a_request_holding_one_is_refused_naming_the_line_its_index_and_what_is_allowed() -> None:
    request = {
        "dataset": {"uri": "gs://landfall-landing/d/"},
        "trainer": {"script": "gs://landfall-code/t.py", "requirements": ["numpy", "--target=/some/host/folder"]},
        "workload": {"parameters": 10},
    }
    with pytest.raises(SchemaError) as caught:
        parse_training_request(request)
    assert caught.value.field == "trainer.requirements[1]"
    assert "'--target=/some/host/folder' is an installer option" in str(caught.value) and ALLOWED in str(caught.value)
    with pytest.raises(SchemaError, match="at most 256"):
        check_requirements(("numpy",) * 257, "trainer.requirements")


def test_the_trainer_refuses_a_line_again_before_installing_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"nothing may run for a refused line: {args}")

    monkeypatch.setattr(subprocess, "run", never)
    code = UserCode(form="script", script="gs://landfall-code/t.py", requirements=("numpy", "--target=/host"))
    with pytest.raises(InstallError, match=r"'--target=/host' is an installer option"):
        user_code.install(code, [], tmp_path / "envs")


def test_the_trainer_gives_every_line_after_a_double_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def run(step: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(step)
        if "venv" in step:  # the environment's folder, as the installer would make it
            Path(step[-1]).mkdir(parents=True)
        return subprocess.CompletedProcess(step, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(user_code, "_see_this_environment", lambda python: None)
    wheel = tmp_path / "team-0.1-py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    code = UserCode(form="package", packages=("gs://landfall-code/w.whl",), module="team", requirements=("numpy",))
    user_code.install(code, [wheel], tmp_path / "envs")
    install = calls[-1]
    assert install[install.index("--") :] == ["--", "numpy", str(wheel)]
