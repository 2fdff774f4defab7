"""The import boundaries in pyproject.toml ([tool.importlinter]) hold, and breaking one fails the check.

import-linter runs in-process through its application API (`use_cases.lint_imports`, which returns whether every
contract was kept). Its command-line entry point is not used: it reconfigures logging for the whole process
(`logging.config.dictConfig`), which would silence the loggers other tests capture.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

import importlinter.configuration
import pytest
from importlinter.application import use_cases

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
NAMES = {contract["id"]: contract["name"] for contract in CONFIG["contracts"]}

importlinter.configuration.configure()


def lint(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[bool, str]:
    """(every contract kept, the report with its line breaks folded)."""
    kept = use_cases.lint_imports(config_filename=str(config), cache_dir=None, no_logo=True)
    return kept, " ".join(capsys.readouterr().out.split())


def test_the_contracts_cover_the_boundaries_of_issue_10() -> None:
    assert set(CONFIG["root_packages"]) == {"functions", "trainer", "schemas", "deploy", "landfall"}
    forbidden = {c["id"]: (c["source_modules"], set(c["forbidden_modules"])) for c in CONFIG["contracts"]}
    assert forbidden["trainer"] == (["trainer"], {"functions", "deploy", "landfall"})
    assert forbidden["functions"][1] >= {"trainer", "torch", "deploy.local", "deploy.vertex_emulator"}
    assert forbidden["schemas"][1] >= {"functions", "trainer", "deploy", "landfall"}
    assert forbidden["adapters"] == (
        ["functions.gcp"],
        {"functions.ingest", "functions.dispatch", "functions.listener", "functions.main", "functions.wiring"},
    )


def test_the_tree_keeps_every_contract(capsys: pytest.CaptureFixture[str]) -> None:
    kept, report = lint(ROOT / "pyproject.toml", capsys)
    assert kept, report
    for name in NAMES.values():
        assert f"{name} KEPT" in report


@pytest.mark.parametrize(
    ("contract", "module", "source"),
    [
        ("adapters", "functions/gcp/leak.py", "from functions.dispatch import handler\n"),
        ("functions", "functions/planning/leak.py", "import torch\n"),
        ("functions", "functions/ingest/leak.py", "def run():\n    from deploy.local import stack\n"),  # lazy counts
        ("trainer", "trainer/leak.py", "from functions.settings import get_settings\n"),
        ("schemas", "schemas/leak.py", "from deploy.topology import load_topology\n"),
    ],
)
def test_breaking_a_contract_fails_and_names_it(
    contract: str,
    module: str,
    source: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for package in CONFIG["root_packages"]:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / module).write_text(source)
    # The checker locates root packages with importlib: make it find the copies, not the modules already imported.
    monkeypatch.syspath_prepend(str(tmp_path))
    for package in CONFIG["root_packages"]:
        monkeypatch.delitem(sys.modules, package, raising=False)

    kept, report = lint(tmp_path / "pyproject.toml", capsys)

    assert not kept
    assert f"{NAMES[contract]} BROKEN" in report
    assert module.removesuffix(".py").replace("/", ".") in report
    assert f"Contracts: {len(NAMES) - 1} kept, 1 broken." in report
