"""Compile the bytecode of the installed modules Landfall's processes import, for `make install`.

`uv pip install --compile-bytecode` compiles all of site-packages (about 14,500 modules, 290 MB of source: most of
a minute of CPU on two cores), while the stack, the CLI and the trainer import about 3,100 of them (torch's core,
the Google Cloud clients, grpc, numpy, sympy...: 82 MB). Without bytecode, with PYTHONDONTWRITEBYTECODE=1 (set on
these machines), every process compiles what it imports each time (`import torch` 8 CPU-s instead of 3), and the
suite starts hundreds of them; so `make install` compiles exactly the listed modules, in parallel, and nothing else.

The list, scripts/bytecode_imports.txt (paths relative to site-packages), is what those processes imported, traced:

    make install                                    # in a fresh clone, then, with bytecode written to a side tree:
    PYTHONPYCACHEPREFIX=/tmp/trace env -u PYTHONDONTWRITEBYTECODE make demo PORTS=free && .venv/bin/landfall down
    PYTHONPYCACHEPREFIX=/tmp/trace env -u PYTHONDONTWRITEBYTECODE .venv/bin/python scripts/bytecode.py import-all
    .venv/bin/python scripts/bytecode.py trace /tmp/trace > scripts/bytecode_imports.txt

The trainer's own libraries (TRAINER_ONLY: torch, sympy, mpmath, tensorboard; half the list and most of its
compiling) are compiled by a process of their own, started in the background at low priority once the rest is done:
no process of the stack or the CLI imports them, and the first trainer starts seconds later, once the stack is up
and a run submitted; `make install` returns meanwhile. Each file is written whole (compileall writes a temporary
file and renames it), so a process importing a module it has not reached yet compiles that one in memory, as
without bytecode.

A module missing from the list still works (the process that imports it compiles it in memory, as before); a listed
module the lock no longer installs is skipped and counted, so the count says when to trace again (after a lock bump).

Usage: python scripts/bytecode.py [compile]      compile the listed modules of this interpreter's site-packages
                                                 (TRAINER_ONLY's in the background)
       python scripts/bytecode.py compile-trainer  compile TRAINER_ONLY's listed modules, here and now
       python scripts/bytecode.py trace DIR      the list, from a PYTHONPYCACHEPREFIX tree
       python scripts/bytecode.py import-all     import every module of Landfall's packages (their static imports)
"""

from __future__ import annotations

import compileall
import importlib
import os
import pkgutil
import sys
import sysconfig
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

LIST = Path(__file__).with_name("bytecode_imports.txt")
PACKAGES = ("functions", "schemas", "trainer", "deploy", "landfall")
"""Landfall's own packages (their bytecode is `make test`'s compileall's, not this list's)."""
TRAINER_ONLY = ("torch/", "sympy/", "mpmath/", "tensorboard/")
"""Top folders of site-packages that only the trainer's processes import (tests/unit/test_bytecode.py holds the
stack's and the CLI's imports to it)."""
BACKGROUND_NICE = 10


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def listed(text: str) -> list[str]:
    """The list's paths: one per line, `#` comments and blank lines left out."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def compile_listed(root: Path, paths: list[str]) -> tuple[int, int]:
    """Compile the paths under root that exist, one worker per CPU (compileall's own -j applies to folders only, and
    a list of files it compiles one by one); (compiled, missing)."""
    present = [str(root / p) for p in paths if (root / p).is_file()]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(_compile, present, chunksize=64))
    failed = [path for path, ok in zip(present, results, strict=True) if not ok]
    if failed:
        raise SystemExit(f"bytecode: {len(failed)} listed modules did not compile (first: {failed[0]}); see above")
    return len(present), len(paths) - len(present)


def _compile(path: str) -> bool:
    return bool(compileall.compile_file(path, quiet=2))


def traced(prefix: Path, root: Path) -> list[str]:
    """The modules under root that processes wrote bytecode for in a PYTHONPYCACHEPREFIX tree (the tree mirrors each
    source's absolute path: DIR/abs/dir/name.cpython-311.pyc for /abs/dir/name.py), relative to root."""
    tag = sys.implementation.cache_tag
    mirrored = prefix / root.resolve().relative_to("/")
    found = set()
    for pyc in mirrored.rglob(f"*.{tag}.pyc"):
        source = pyc.parent / (pyc.name[: -len(f".{tag}.pyc")] + ".py")
        relative = source.relative_to(mirrored)
        if (root / relative).is_file():
            found.add(relative.as_posix())
    return sorted(found)


def import_all() -> None:
    for name in PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            importlib.import_module(info.name)


def trainer_only(path: str) -> bool:
    return path.startswith(TRAINER_ONLY)


def compile_trainer_later() -> None:
    """Compile TRAINER_ONLY's listed modules in a process of its own, at low priority, not waited for."""
    import subprocess

    subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "compile-trainer"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # it outlives `make install` and is not stopped with it
        preexec_fn=lambda: os.nice(BACKGROUND_NICE),
    )


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "compile"
    if command == "compile" and len(argv) <= 1:
        paths = listed(LIST.read_text())
        compiled, missing = compile_listed(site_packages(), [p for p in paths if not trainer_only(p)])
        note = f"; {missing} listed modules not installed (trace again: {LIST.name})" if missing else ""
        later = sum(trainer_only(p) for p in paths)
        print(
            f"bytecode: {compiled} imported modules compiled{note}; the trainer's {later} compiling in the background"
        )
        compile_trainer_later()
        return 0
    if command == "compile-trainer" and len(argv) == 1:
        compile_listed(site_packages(), [p for p in listed(LIST.read_text()) if trainer_only(p)])
        return 0
    if command == "trace" and len(argv) == 2:
        print("# site-packages modules the stack, the CLI and the trainer import (traced by scripts/bytecode.py)")
        print("\n".join(traced(Path(argv[1]), site_packages())))
        return 0
    if command == "import-all" and len(argv) == 1:
        import_all()
        return 0
    print(__doc__.split("Usage: ", 1)[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
