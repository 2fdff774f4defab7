"""The stack's and the CLI's processes import none of what `make install` compiles in the background
(scripts/bytecode.py TRAINER_ONLY): its bytecode may still be on its way when the stack starts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]
spec = importlib.util.spec_from_file_location("bytecode", REPO / "scripts" / "bytecode.py")
assert spec is not None and spec.loader is not None
bytecode = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bytecode)


def test_no_process_of_the_stack_or_the_cli_imports_what_is_compiled_in_the_background() -> None:
    """Each warmed function's modules (functions/main.py WARM_IMPORTS), the bridge, the stack, the emulator, the CLI."""
    import os
    import subprocess

    probe = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))\n"
    )
    stack = [
        "functions.main",
        "functions.wiring",
        "functions.dispatch.handler",
        "functions.ingest.handler",
        "functions.listener.handler",
        "functions.reconciler.handler",
        "deploy.local.bridge",
        "deploy.local.stack",
        "deploy.vertex_emulator.__main__",
        "landfall.cli",
    ]
    for target in ("on_object_finalized", "dispatch", "on_job_event"):
        env = {**os.environ, "FUNCTION_TARGET": target}
        found = subprocess.run(
            [sys.executable, "-c", probe, *stack], env=env, cwd=REPO, capture_output=True, text=True, check=True
        ).stdout
        tops = {top.rstrip("/") for top in bytecode.TRAINER_ONLY}
        imported = {name.strip(" '") for name in found.strip().strip("[]").split(",")}
        assert not tops & imported, f"{sorted(tops & imported)} imported by the stack or the CLI ({target})"
