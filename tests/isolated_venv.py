"""What the tests that run a deployable unit the way Google runs it share (tests/integration/test_deploy_bundle.py, a
function bundle under functions-framework; test_deploy_ui_image.py, the dashboard's container CMD): a fresh virtual
environment holding exactly what its requirements files install, and the server process started from it, waited for
until it answers and stopped at the end.

The environment is cached under .landfall/cache/, keyed by the content of the requirements files (and of the files
they include with `-r`) and the Python version, so only the first run pays for the install: uv (what `make install`
uses, given pip's package sources by scripts/uv_sources.py) takes seconds, pip (the fallback where the venv has no uv)
about a minute and a half.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from deploy.gcp.bundles import REPO_ROOT
from tests.polling import wait_for

CACHE = REPO_ROOT / ".landfall" / "cache"
INSTALL_TIMEOUT_S = 600


def included(requirements: Path) -> list[Path]:
    """The files a requirements file includes with `-r FILE` (relative to it)."""
    lines = (line.split("#", 1)[0].strip() for line in requirements.read_text().splitlines())
    return [requirements.parent / line[2:].strip() for line in lines if line.startswith("-r ")]


def requirements_venv(files: list[Path], *, name: str, compile_bytecode: bool = False) -> Path:
    """A virtual environment holding what `pip install -r FILE ...` installs, created once per content of those
    files (and of the files they include) and Python version, as .landfall/cache/NAME-venv-KEY; compile_bytecode
    writes the .pyc files at install time, as Cloud Run functions' build does."""
    python = shutil.which("python3") or sys.executable
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout
    digest = hashlib.sha256(version.encode() + (b"compiled" if compile_bytecode else b""))
    for path in sorted({p.resolve() for f in files for p in (f, *included(f))}):
        digest.update(path.read_bytes())
    venv = CACHE / f"{name}-venv-{digest.hexdigest()[:16]}"
    done = venv / ".installed"
    if done.exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    target = str(venv / "bin" / "python")
    requirements = [word for f in files for word in ("-r", str(f))]
    uv = Path(sys.executable).with_name("uv")
    if uv.exists():
        sources = subprocess.run(
            [sys.executable, str(REPO_ROOT / "scripts" / "uv_sources.py")], capture_output=True, text=True, check=True
        ).stdout
        compiled = ["--compile-bytecode"] if compile_bytecode else []
        install = [str(uv), "pip", "install", "-q", *compiled, "--python", target, *shlex.split(sources)]
        install += requirements
    else:
        install = [target, "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements]
    subprocess.run(install, check=True, timeout=INSTALL_TIMEOUT_S)
    done.write_text("\n".join(str(f) for f in files))
    return venv


def wait_answering(process: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float, what: str) -> None:
    """Poll url until the server answers (any HTTP status counts); fails with the end of its log if it exits."""

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"{what} exited {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False
        return True

    wait_for(answers, timeout_s, f"{what} to answer")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate the server, and kill it if it has not ended in 20 s."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
