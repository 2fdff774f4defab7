"""A team's own training code on one node: what to run (from the job's environment), fetched from the code bucket
and installed with its requirements, with the contract's local paths around it (docs/trainer-contract.md).

The CustomJob (functions/dispatch/job_spec.py) runs Landfall's trainer image with these variables:

- LANDFALL_TRAINER_FORM: built-in | script | package (vocabulary.TRAINER_FORMS; an image never reaches here);
- LANDFALL_TRAINER_SCRIPT (gs://), LANDFALL_TRAINER_PACKAGES and LANDFALL_TRAINER_REQUIREMENTS (JSON lists),
  LANDFALL_TRAINER_MODULE, LANDFALL_LAUNCH (per-gpu | per-node).

Requirements and packages are installed into a virtual environment that sees the image's own packages (torch)
and is keyed by the hash of what it holds, under LANDFALL_CODE_ENV_CACHE (the Vertex emulator sets one cache for the
host, so the second run of the same code starts in seconds; on Vertex it is a fresh folder on the replica's disk).
The environment's own pip installs, since it counts the image's packages as installed; uv (on PATH or beside the
interpreter) only where the requirements replace the image's packages. Requirement lines are package specifiers
only (schemas/requirement_lines.py), checked again here and given after `--`, so none is ever an installer option. They
are resolved with the image's installed packages as constraints (trainer/image_packages.py): torch is never replaced
unless the requirements hold image_packages.REPLACE_LINE. The cache keeps at most LANDFALL_CODE_ENV_CACHE_MAX
environments (default CACHE_MAX), the least recently used removed first.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.dataset_layout import is_data_object
from schemas.requirement_lines import ALLOWED, requirement_problem
from schemas.run_metrics import RunWarning
from trainer import image_packages, storage
from trainer.errors import ConfigError, DataError

FORM_ENV = "LANDFALL_TRAINER_FORM"
SCRIPT_ENV = "LANDFALL_TRAINER_SCRIPT"
PACKAGES_ENV = "LANDFALL_TRAINER_PACKAGES"
MODULE_ENV = "LANDFALL_TRAINER_MODULE"
REQUIREMENTS_ENV = "LANDFALL_TRAINER_REQUIREMENTS"
LAUNCH_ENV = "LANDFALL_LAUNCH"
ENV_CACHE_ENV = "LANDFALL_CODE_ENV_CACHE"
ENV_CACHE_MAX_ENV = "LANDFALL_CODE_ENV_CACHE_MAX"
CACHE_MAX = 8
"""Environments the cache keeps by default (each may hold gigabytes)."""
FACTS_FILE = ".landfall-packages.json"
"""In each environment: the installed versions of the packages its requirements named, and its warnings."""
CHAMPION_DIR_ENV = "LANDFALL_CHAMPION_MODEL_DIR"
"""The route's production model to score on this run's held-out rows (docs/trainer-contract.md)."""
GCS_MOUNT = "/gcs"
"""Vertex's Cloud Storage FUSE mount: gs://B/P is /gcs/B/P inside a replica."""
INSTALL_TAIL_LINES = 8


@dataclass(frozen=True)
class UserCode:
    """What this node runs."""

    form: str
    """built-in | script | package."""
    launch: str = "per-gpu"
    script: str = ""
    packages: tuple[str, ...] = ()
    module: str = ""
    requirements: tuple[str, ...] = ()

    @property
    def builtin(self) -> bool:
        return self.form == "built-in"


def _json_list(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = environ.get(name, "")
    if not raw:
        return ()
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r}: expected a JSON list of strings ({exc})") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{name}={raw!r}: expected a JSON list of strings")
    return tuple(value)


def user_code_from_env(environ: Mapping[str, str]) -> UserCode:
    """The code this node runs; the built-in trainer when LANDFALL_TRAINER_FORM is unset."""
    form = environ.get(FORM_ENV, "built-in") or "built-in"
    code = UserCode(
        form=form,
        launch=environ.get(LAUNCH_ENV, "per-gpu") or "per-gpu",
        script=environ.get(SCRIPT_ENV, ""),
        packages=_json_list(environ, PACKAGES_ENV),
        module=environ.get(MODULE_ENV, ""),
        requirements=_json_list(environ, REQUIREMENTS_ENV),
    )
    if form not in ("built-in", "script", "package"):
        raise ConfigError(f"{FORM_ENV}={form!r}: expected built-in, script or package")
    if code.launch not in ("per-gpu", "per-node"):
        raise ConfigError(f"{LAUNCH_ENV}={code.launch!r}: expected per-gpu or per-node")
    if form == "script" and not code.script:
        raise ConfigError(f"{FORM_ENV}=script needs {SCRIPT_ENV} (the gs:// URI of the Python file)")
    if form == "package" and not (code.packages and code.module):
        raise ConfigError(f"{FORM_ENV}=package needs {PACKAGES_ENV} and {MODULE_ENV}")
    return code


class InstallError(ConfigError):
    """A requirement or package could not be installed: the run's reason is bad-config."""


def fetch(code: UserCode, workdir: Path) -> tuple[Path | None, list[Path]]:
    """Download the script and the packages into workdir/code; (script path, package paths)."""
    target = workdir / "code"
    target.mkdir(parents=True, exist_ok=True)
    script = None
    if code.script:  # gs://B/NAME or gs://B/NAME#GENERATION (the version the run found): saved as NAME
        script = target / code.script.split("#", 1)[0].rsplit("/", 1)[-1]
        _download(code.script, script)
    packages = []
    for uri in code.packages:
        path = target / uri.split("#", 1)[0].rsplit("/", 1)[-1]
        _download(uri, path)
        packages.append(path)
    return script, packages


def _download(uri: str, path: Path) -> None:
    try:
        storage.download_file(uri, str(path))
    except Exception as exc:  # NotFound, Forbidden, a local path missing: the request named code that is not there
        raise ConfigError(fetch_failure(uri, exc)) from exc


def fetch_failure(uri: str, exc: BaseException) -> str:
    """What to say when a code object cannot be fetched. A `#GENERATION` URI is the version the run was planned with
    (schemas/code_version.py): when that is what is missing, the object was replaced since, and a bucket without
    object versioning keeps no old version."""
    base, _, generation = uri.partition("#")
    if generation:
        return (
            f"cannot fetch {base} at generation {generation}, the version this run was planned with ({exc}): it was "
            "uploaded again since, and the code bucket keeps no old versions. `landfall retry` the run to train the "
            "version there now, or turn on object versioning on the code bucket to keep each run's version"
        )
    return f"cannot fetch {uri}: {exc}; upload it to the code bucket (landfall submit does)"


def _uv() -> str | None:
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.is_file() else shutil.which("uv")


def environment_key(code: UserCode, packages: list[Path]) -> str:
    """Content hash of what the environment holds: the interpreter, the image's packages, the requirements and each
    package's bytes."""
    digest = hashlib.sha256(sys.version.encode())
    digest.update(image_packages.constraints_text(image_packages.image()).encode())
    for requirement in sorted(code.requirements):
        digest.update(b"r\0" + requirement.encode())
    for path in packages:
        digest.update(b"p\0" + path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:24]


def install(code: UserCode, packages: list[Path], cache: Path, environ: Mapping[str, str] | None = None) -> str:
    """The interpreter to run the code with: this one when nothing needs installing, else the cached environment's
    (built once per content, under a lock, so replicas on one host share it). InstallError carries the installer's
    last lines, or the requirements that conflict with the image's packages."""
    if not code.requirements and not packages:
        return sys.executable
    for line in code.requirements:  # the dispatcher refused these already; checked again where they are used
        problem = requirement_problem(line)
        if problem is not None:
            raise InstallError(f"{REQUIREMENTS_ENV}: {line[:200]!r} {problem}; {ALLOWED}")
    replace = any(line.strip() == image_packages.REPLACE_LINE for line in code.requirements)
    requirements = [line for line in code.requirements if line.strip() != image_packages.REPLACE_LINE]
    image = image_packages.image()
    conflicts = image_packages.conflicts(requirements, image)
    if conflicts and not replace:
        raise InstallError(image_packages.refusal(conflicts))
    warnings = [
        RunWarning("image-packages-replaced", f"installed over the image's packages as asked: {c}").to_dict()
        for c in conflicts
    ]
    env_dir = cache / environment_key(code, packages)
    python = env_dir / "bin" / "python"
    ready = env_dir / ".landfall-ready"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{env_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.is_file():
            ready.touch()  # recently used: the last the cache removes
            return str(python)
        shutil.rmtree(env_dir, ignore_errors=True)
        # uv does not count the image's packages (outside the environment) as installed, so with them pinned it
        # would download the same torch again; the environment's own pip sees them and installs only what is missing
        uv = _uv() if replace else None
        constraints = cache / f"{env_dir.name}.constraints.txt"
        constraints.write_text(image_packages.constraints_text(image))
        # the image's packages pinned, unless the requirements ask to replace them
        pin = [] if replace else ["--constraint", str(constraints)]
        # after `--`, so that no line is ever read as an installer option
        what = ["--", *requirements, *(str(p) for p in packages)]
        if uv:
            steps = [
                [uv, "venv", "--system-site-packages", "--python", sys.executable, str(env_dir)],
                [uv, "pip", "install", "--compile-bytecode", "--python", str(python), *pin, *what],
            ]
        else:
            steps = [
                [sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)],
                [str(python), "-m", "pip", "install", "--disable-pip-version-check", *pin, *what],
            ]
        for i, step in enumerate(steps):
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            sys.stderr.write(done.stdout + done.stderr)
            if done.returncode != 0:
                lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
                tail = "\n".join(lines[-INSTALL_TAIL_LINES:])
                hint = (
                    "" if replace else f" (the image's packages are pinned: {image_packages.REPLACE_LINE!r} lifts that)"
                )
                raise InstallError(f"installing {' '.join(what[1:])} failed{hint}:\n{tail}")
            if i == 0:
                _see_this_environment(python)
        versions = image_packages.installed([*image_packages.site_dirs(env_dir), *sys.path])
        facts = {
            "packages": {n: versions[n] for n in image_packages.named(requirements) if n in versions},
            "warnings": warnings,
        }
        (env_dir / FACTS_FILE).write_text(json.dumps(facts, sort_keys=True))
        ready.write_text("ok")
    _evict(cache, keep=env_dir.name, most=_cache_max(environ or os.environ))
    return str(python)


def environment_facts(python: str) -> dict[str, Any]:
    """What the run records of its environment (metrics.json): `packages` (name -> installed version of each
    package the requirements named) and `warnings`; empty for the image's own interpreter."""
    path = Path(python).parent.parent / FACTS_FILE
    try:
        facts = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return facts if isinstance(facts, dict) else {}


def _cache_max(environ: Mapping[str, str]) -> int:
    raw = environ.get(ENV_CACHE_MAX_ENV, "")
    try:
        most = int(raw) if raw else CACHE_MAX
    except ValueError as exc:
        raise ConfigError(f"{ENV_CACHE_MAX_ENV}={raw!r}: expected a whole number of environments >= 1") from exc
    if most < 1:
        raise ConfigError(f"{ENV_CACHE_MAX_ENV}={raw!r}: expected a whole number of environments >= 1")
    return most


def _evict(cache: Path, keep: str, most: int) -> None:
    """Remove the least recently used environments past `most` (never `keep`, nor one another process holds)."""
    built = sorted(
        (p.parent for p in cache.glob("*/.landfall-ready") if p.parent.name != keep),
        key=lambda d: (d / ".landfall-ready").stat().st_mtime_ns,
    )
    for env_dir in built[: max(0, len(built) - (most - 1))]:
        with open(cache / f"{env_dir.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # being built or checked by another replica: left for a later run
            (env_dir / ".landfall-ready").unlink(missing_ok=True)
            shutil.rmtree(env_dir, ignore_errors=True)
            (cache / f"{env_dir.name}.constraints.txt").unlink(missing_ok=True)


def _see_this_environment(python: Path) -> None:
    """Make the new environment see this interpreter's packages (torch and the rest of the image) after its own:
    --system-site-packages reaches the base interpreter only, and the image's packages may live in a venv."""
    found = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    own = Path(found.stdout.strip())
    ours = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (own / "landfall-image-packages.pth").write_text("".join(f"{p}\n" for p in ours if Path(p).is_dir()))


@dataclass(frozen=True)
class LocalPaths:
    """The contract's local paths on this node."""

    data_dir: str
    model_dir: str
    data_files: str
    metrics_file: str
    staged_model: bool
    """True where no FUSE mount is: the launcher copies model_dir to AIP_MODEL_DIR after the code ends."""


def fuse_path(uri: str, mount: str = GCS_MOUNT) -> str:
    """gs://B/P as the FUSE path /gcs/B/P; a local path unchanged."""
    return f"{mount}/{uri.removeprefix('gs://')}" if uri.startswith("gs://") else uri


def stage(environ: Mapping[str, str], workdir: Path, mount: str = GCS_MOUNT) -> LocalPaths:
    """Local paths for the dataset and the model. On Vertex the FUSE mount already shows both; elsewhere (the Vertex
    emulator, a laptop) the dataset's data objects are downloaded and the model folder is staged, standing in for
    the mount. Writes LANDFALL_DATA_FILES (JSON lines: name, generation, size) either way: the dataset version the
    dispatcher wrote for the run (version_objects), each object downloaded at its generation."""
    data_uri = environ.get("LANDFALL_DATA_URI", "")
    model_uri = environ.get("AIP_MODEL_DIR", "")
    objects = version_objects(environ, data_uri)
    data_files = workdir / "data-files.jsonl"
    data_files.write_text("".join(json.dumps(o, sort_keys=True) + "\n" for o in objects))
    metrics = workdir / "metrics.jsonl"
    metrics.touch()
    mounted = os.path.isdir(mount) and data_uri.startswith("gs://")
    if mounted:
        return LocalPaths(fuse_path(data_uri, mount), fuse_path(model_uri, mount), str(data_files), str(metrics), False)
    data_dir, model_dir = workdir / "data", workdir / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    for obj in objects:
        path = data_dir / str(obj["name"])
        path.parent.mkdir(parents=True, exist_ok=True)
        uri = storage.versioned(storage.join(data_uri, str(obj["name"])), str(obj.get("generation") or ""))
        storage.download_file(uri, str(path))
    return LocalPaths(str(data_dir), str(model_dir), str(data_files), str(metrics), bool(model_uri))


def version_objects(environ: Mapping[str, str], data_uri: str) -> list[dict[str, object]]:
    """The run's dataset version: the listing at LANDFALL_DATA_FILES as the dispatcher wrote it before creating the
    job (from the request's snapshot, dataset.objects), read through the FUSE path where the mount is and from the
    object that path stands for where it is not. Without the variable (the launcher run by hand), a listing of the
    dataset now. DataError when the variable names a listing that cannot be read."""
    where = environ.get("LANDFALL_DATA_FILES", "")
    if not where:
        return list_dataset(data_uri) if data_uri else []
    from google.api_core.exceptions import GoogleAPIError

    uri = where if os.path.isfile(where) else "gs://" + where.removeprefix(GCS_MOUNT + "/")
    try:
        with storage.open_read(uri) as f:
            text = f.read().decode("utf-8")
    except (OSError, ValueError, GoogleAPIError) as exc:
        raise DataError(uri, f"the dataset version's listing cannot be read ({exc}); the dispatcher writes it "
                        "before it creates the job: retry the run (`landfall retry RUN_ID`)") from exc  # fmt: skip
    objects: list[dict[str, object]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            objects.append(
                {"name": str(item["name"]), "generation": str(item["generation"]), "size": int(item["size"])}
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(uri, f"expected a JSON line with name, generation and size ({exc})", line=number) from exc
    return objects


def list_dataset(data_uri: str) -> list[dict[str, object]]:
    """The dataset's data objects (control files and _/. names left out): name relative to the dataset, generation
    (Cloud Storage's, "" for a local file) and size in bytes."""
    uri = storage.resolve(data_uri)
    if storage.is_gcs(uri):
        bucket, prefix = storage.split_gcs(uri)
        blobs = storage.client().list_blobs(bucket, prefix=prefix)
        found = [(b.name[len(prefix) :], str(b.generation or ""), int(b.size or 0)) for b in blobs]
    else:
        root = Path(uri)
        found = [(str(p.relative_to(root)), "", p.stat().st_size) for p in root.rglob("*") if p.is_file()]
    return [
        {"name": name, "generation": generation, "size": size}
        for name, generation, size in sorted(found)
        if is_data_object(name)
    ]


def stage_folder(where: str, local: Path, mount: str = GCS_MOUNT) -> str:
    """A folder the job names by its FUSE path (/gcs/B/P) or gs:// URI, as a local path: the path itself where the
    mount shows it, else a copy of its files downloaded into `local` (the route's champion for a team's image,
    LANDFALL_CHAMPION_MODEL_DIR, where no mount is)."""
    uri = "gs://" + where.removeprefix(GCS_MOUNT + "/") if where.startswith(GCS_MOUNT + "/") else where
    if not uri.startswith("gs://") or os.path.isdir(mount):
        return fuse_path(uri, mount)
    base = uri.rstrip("/") + "/"
    for file_uri in storage.list_files(base):
        path = local / file_uri.removeprefix(base)
        path.parent.mkdir(parents=True, exist_ok=True)
        storage.download_file(file_uri, str(path))
    local.mkdir(parents=True, exist_ok=True)
    return str(local)


def publish_model(paths: LocalPaths, model_uri: str) -> list[str]:
    """Copy what the code wrote to LANDFALL_MODEL_DIR to AIP_MODEL_DIR (where no FUSE mount did it already)."""
    if not paths.staged_model:
        return []
    root = Path(paths.model_dir)
    written = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        uri = storage.join(model_uri, str(path.relative_to(root)))
        storage.upload_file(str(path), uri)
        written.append(uri)
    return written


def new_workdir(environ: Mapping[str, str]) -> Path:
    """A fresh folder for this node's code, data and metrics."""
    return Path(tempfile.mkdtemp(prefix="landfall-node-", dir=environ.get("LANDFALL_WORK_DIR") or None))
