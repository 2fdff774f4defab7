"""Staging under .landfall/deploy/: each function's source bundle and the trainer image's build context.

A function bundle (`functions/<name>/`, the folder `gcloud functions deploy --source` uploads) holds exactly what
the function imports and reads, with the repository's layout:

- functions/ and schemas/ without tests, caches or golden examples;
- the deploy/ modules they import (found by reading their imports) and the data files those read
  (topology.toml, routes.toml, teams.toml);
- main.py at the root, re-exporting the entry point (Cloud Run functions load main.py);
- requirements.txt: functions/requirements.txt, refused if it names torch or a test tool.

Beside it, `<name>.env.yaml` holds the function's environment (`--env-vars-file`). The trainer context
(`trainer/`) holds trainer/Dockerfile at its root and the files it copies; its tag is the hash of its content, so
an unchanged trainer is not rebuilt.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from deploy.images import trainer_image

REPO_ROOT = Path(__file__).resolve().parents[2]
STAGE_DIR = Path(".landfall") / "deploy"
"""Relative to the repository root: the commands name staged paths this way, run from the root."""
DEPLOY_DATA_FILES = ("deploy/topology.toml", "deploy/routes.toml", "deploy/teams.toml")
"""Data files the functions read through deploy/ modules (topology, routes, teams)."""
SKIP_DIRS = frozenset({"__pycache__", "tests", "examples", ".pytest_cache", ".ruff_cache"})
SKIP_SUFFIXES = (".pyc", ".pyo")
NOT_FOR_FUNCTIONS = ("torch", "pytest", "hypothesis", "ruff", "fake-gcs-server", "tensorboard", "pyarrow")
"""Packages a function bundle's requirements must not name: the trainer's, and test tools."""
TRAINER_CONTEXT = ("trainer", "schemas")
"""What trainer/Dockerfile copies (a test checks its COPY lines against this)."""
GCLOUDIGNORE = "# Staged by `landfall deploy`: upload everything here except caches.\n__pycache__/\n*.pyc\n"


class BundleError(ValueError):
    """A bundle cannot be staged as it must be; the message says what to fix."""


@dataclass(frozen=True)
class FunctionBundle:
    name: str
    source: Path
    """The bundle folder, relative to the repository root."""
    env_file: Path
    """Its --env-vars-file, relative to the repository root."""


def _files(root: Path, relative: str) -> Iterable[Path]:
    """Files under root/relative (a file or a folder), without caches, tests and golden examples."""
    start = root / relative
    if start.is_file():
        yield start
        return
    for path in sorted(start.rglob("*")):
        parts = path.relative_to(root).parts
        if path.is_file() and not SKIP_DIRS.intersection(parts) and not path.name.endswith(SKIP_SUFFIXES):
            yield path


def _copy(root: Path, relative: str, into: Path) -> None:
    for path in _files(root, relative):
        target = into / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def deploy_modules(root: Path = REPO_ROOT) -> tuple[str, ...]:
    """The deploy/ modules that functions/ and schemas/ import, and those they import in turn, as paths."""
    wanted: set[str] = set()
    queue = [p for d in ("functions", "schemas") for p in _files(root, d) if p.suffix == ".py"]
    while queue:
        tree = ast.parse(queue.pop().read_text())
        for node in ast.walk(tree):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module and not node.level
                else []
            )
            for module in modules:
                if module.split(".")[0] != "deploy" or module == "deploy":
                    continue
                path = module.replace(".", "/") + ".py"
                if path not in wanted and (root / path).is_file():
                    wanted.add(path)
                    queue.append(root / path)
    return ("deploy/__init__.py", *sorted(wanted))


def function_requirements(root: Path = REPO_ROOT) -> str:
    text = (root / "functions" / "requirements.txt").read_text()
    for line in text.splitlines():
        name = line.split("#", 1)[0].strip().split("==")[0].split(">")[0].split("<")[0].strip().lower()
        if name in NOT_FOR_FUNCTIONS:
            raise BundleError(
                f"functions/requirements.txt names {name!r}, which a function must not install "
                "(it belongs to the trainer image or the test tools); remove it from that file"
            )
    return text


def main_py(entry_point: str) -> str:
    return (
        f'"""Cloud Run functions loads main.py: the `{entry_point}` entry point (staged by `landfall deploy`)."""'
        f'\n\nfrom functions.main import {entry_point}\n\n__all__ = ["{entry_point}"]\n'
    )


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def stage_function(
    name: str, env: Mapping[str, str], root: Path = REPO_ROOT, out: Path | None = None
) -> FunctionBundle:
    """Stage one function's bundle and env file; paths in the result are relative to root."""
    base = out or root / STAGE_DIR
    folder = _fresh(base / "functions" / name)
    for relative in ("functions", "schemas", *deploy_modules(root), *DEPLOY_DATA_FILES):
        _copy(root, relative, folder)
    (folder / "main.py").write_text(main_py(name))
    (folder / "requirements.txt").write_text(function_requirements(root))
    (folder / ".gcloudignore").write_text(GCLOUDIGNORE)
    env_file = base / "functions" / f"{name}.env.yaml"
    env_file.write_text(env_yaml(env))
    return FunctionBundle(name, _relative(folder, root), _relative(env_file, root))


def stage_trainer(root: Path = REPO_ROOT, out: Path | None = None) -> tuple[Path, str]:
    """Stage the trainer's build context; returns (its folder relative to root, its content hash)."""
    folder = _fresh((out or root / STAGE_DIR) / "trainer")
    for relative in TRAINER_CONTEXT:
        _copy(root, relative, folder)
    shutil.copy2(root / trainer_image().dockerfile, folder / "Dockerfile")
    (folder / ".gcloudignore").write_text(GCLOUDIGNORE)
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return _relative(folder, root), digest.hexdigest()[:16]


BUILD_CONFIG = "trainer.cloudbuild.json"
"""The Cloud Build config beside the trainer context (outside it, so that it does not move the content hash)."""
DOCKER_BUILDER = "gcr.io/cloud-builders/docker"


def build_config(build_uris: Mapping[str, tuple[str, ...]]) -> dict[str, object]:
    """One docker build per image build (deploy/topology.toml [[trainer_image.builds]]: its base image and the
    compute capabilities its torch must carry, as build arguments), each tagged with its URI in every job region, and
    `images` listing them all: Cloud Build pushes each when every build succeeds. Build logs go to Cloud Logging
    only, as a build run by a user-specified service account needs
    (cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts)."""
    steps: list[dict[str, object]] = []
    for build in trainer_image().builds:
        uris = build_uris.get(build.name, ())
        if not uris:
            continue
        tags = [word for uri in uris for word in ("--tag", uri)]
        arguments = [
            "--build-arg",
            f"BASE_IMAGE={build.base_image}",
            "--build-arg",
            f"COMPUTE_CAPABILITIES={' '.join(build.compute_capabilities)}",
            "--build-arg",
            f"REDUCTION_SERVER={'1' if build.reduction_server else '0'}",
        ]
        steps.append({"id": build.name, "name": DOCKER_BUILDER, "args": ["build", *arguments, *tags, "."]})
    return {
        "steps": steps,
        "images": [uri for uris in build_uris.values() for uri in uris],
        "options": {"logging": "CLOUD_LOGGING_ONLY"},
    }


def stage_build_config(
    build_uris: Mapping[str, tuple[str, ...]], root: Path = REPO_ROOT, out: Path | None = None
) -> Path:
    """Write the trainer's Cloud Build config; returns its path relative to root."""
    base = out or root / STAGE_DIR
    base.mkdir(parents=True, exist_ok=True)
    path = base / BUILD_CONFIG
    path.write_text(json.dumps(build_config(build_uris), indent=2) + "\n")
    return _relative(path, root)


SETTINGS_DIR = STAGE_DIR / "projects"
"""`<project>.env.yaml` here: the functions' environment as `landfall deploy --project <project>` last rendered it
(the deployed dispatcher's settings), which `landfall plan --custom-job --project` reads."""


def env_yaml(env: Mapping[str, str]) -> str:
    """An --env-vars-file: one `KEY: "value"` a line (a JSON string is a YAML string)."""
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in env.items())


def read_env_yaml(text: str) -> dict[str, str]:
    """What env_yaml wrote, read back."""
    env = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            env[key] = str(json.loads(value))
    return env


def settings_file(project: str, root: Path = REPO_ROOT) -> Path:
    return root / SETTINGS_DIR / f"{project}.env.yaml"


def record_settings(project: str, env: Mapping[str, str], root: Path = REPO_ROOT) -> Path:
    """Keep the functions' environment for project (one file per project, so deploying another keeps it)."""
    path = settings_file(project, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(env_yaml(env))
    return path


def recorded_settings(project: str, root: Path = REPO_ROOT) -> dict[str, str] | None:
    """The functions' environment `landfall deploy --project project` recorded in this checkout, or None."""
    path = settings_file(project, root)
    return read_env_yaml(path.read_text()) if path.is_file() else None


def _relative(path: Path, root: Path) -> Path:
    try:
        return path.relative_to(root)
    except ValueError:
        return path
