"""scripts/bytecode.py: `make install` compiles the site-packages modules Landfall's processes import (the traced
list), and the list is read back from a PYTHONPYCACHEPREFIX tree the way Python writes it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "scripts" / "bytecode.py"
spec = importlib.util.spec_from_file_location("bytecode", SCRIPT)
assert spec is not None and spec.loader is not None
bytecode = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bytecode)


def test_a_traced_tree_gives_the_imported_modules_relative_to_site_packages(tmp_path: Path) -> None:
    root = tmp_path / "venv" / "site-packages"
    for source in ("torch/__init__.py", "torch/nn/linear.py", "never_imported.py"):
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        (root / source).write_text("")
    prefix = tmp_path / "trace"
    tag = sys.implementation.cache_tag
    mirrored = prefix / root.resolve().relative_to("/")
    for pyc in (f"torch/__init__.{tag}.pyc", f"torch/nn/linear.{tag}.pyc", f"gone.{tag}.pyc"):
        (mirrored / pyc).parent.mkdir(parents=True, exist_ok=True)
        (mirrored / pyc).write_bytes(b"")
    assert bytecode.traced(prefix, root) == ["torch/__init__.py", "torch/nn/linear.py"]


def test_the_list_leaves_out_comments_and_blank_lines() -> None:
    text = "# traced\n\ntorch/__init__.py\n  numpy/core.py \n"
    assert bytecode.listed(text) == ["torch/__init__.py", "numpy/core.py"]


def test_the_shipped_list_holds_sorted_relative_python_sources_of_what_the_stack_imports() -> None:
    paths = bytecode.listed(bytecode.LIST.read_text())
    assert paths == sorted(set(paths))
    assert all(p.endswith(".py") and not p.startswith("/") and ".." not in p for p in paths)
    for needed in ("torch/__init__.py", "google/cloud/firestore_v1/__init__.py", "grpc/__init__.py"):
        assert needed in paths, f"{needed} missing from {bytecode.LIST}: trace again (scripts/bytecode.py's docstring)"


def test_make_install_compiles_the_list_and_not_all_of_site_packages() -> None:
    recipe = (REPO / "Makefile").read_text().split("$(STAMP):", 1)[1].split("\ninstall:", 1)[0]
    assert "scripts/bytecode.py" in recipe
    assert "--compile-bytecode" not in recipe


def test_the_background_compile_takes_the_trainers_folders_and_the_rest_is_compiled_first() -> None:
    paths = bytecode.listed(bytecode.LIST.read_text())
    later = [p for p in paths if bytecode.trainer_only(p)]
    assert "torch/__init__.py" in later and "google/cloud/firestore_v1/__init__.py" not in later
    assert 0 < len(later) < len(paths)
