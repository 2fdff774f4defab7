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


def test_the_layers_state_the_architecture() -> None:
    """Entry points over the composition root over the handlers over adapters, rules, planner and schemas; the CLI
    and the local tooling above functions; the trainer apart."""
    assert set(CONFIG["root_packages"]) == {"functions", "trainer", "schemas", "deploy", "landfall"}
    contracts = {c["id"]: c for c in CONFIG["contracts"]}
    layers = [{name.strip() for name in layer.replace(":", "|").split("|")} for layer in contracts["layers"]["layers"]]
    order = {module: depth for depth, layer in enumerate(layers) for module in layer}
    handlers = ("functions.ingest", "functions.dispatch", "functions.listener", "functions.reconciler")
    assert order["landfall"] < order["deploy.gcp"] == order["deploy.local"] < order["functions.main"]
    assert order["functions.main"] < order["functions.wiring"] < min(order[h] for h in handlers)
    assert len({order[h] for h in handlers}) == 1 and "|" in contracts["layers"]["layers"][order[handlers[0]]]
    assert max(order[h] for h in handlers) < order["functions.gcp"] < order["functions.records"]
    assert order["functions.records"] < order["functions.planning"] < order["schemas"] == len(layers) - 1
    assert contracts["trainer"]["forbidden_modules"] == ["functions", "deploy", "landfall"]
    assert {"trainer", "torch"} <= set(contracts["functions"]["forbidden_modules"])
    assert contracts["deploy"]["forbidden_modules"] == ["functions"]


def test_the_tree_keeps_every_contract(capsys: pytest.CaptureFixture[str]) -> None:
    kept, report = lint(ROOT / "pyproject.toml", capsys)
    assert kept, report
    for name in NAMES.values():
        assert f"{name} KEPT" in report


@pytest.mark.parametrize(  # the module written with source (replacing an existing one keeps it in its layer)
    ("contract", "module", "source"),
    [
        ("layers", "functions/gcp/leak.py", "from functions.dispatch import handler\n"),  # an adapter, a handler
        ("layers", "functions/reconciler/leak.py", "from functions.listener import handler\n"),  # handler, handler
        ("layers", "functions/records/leak.py", "from functions.gcp import vertex\n"),  # a rule, an adapter
        ("layers", "functions/ingest/leak.py", "def run():\n    from deploy.local import stack\n"),  # lazy counts
        ("layers", "schemas/leak.py", "from deploy.topology import load_topology\n"),
        ("ingest", "functions/ingest/manifest.py", "from functions.ingest import handler\n"),  # a rule, its handler
        ("cli", "landfall/ticks.py", "from landfall.commands import datasets\n"),  # a helper importing a command
        ("landfall-public", "landfall/commands/leak.py", "from functions.dispatch import handler\n"),
        ("landfall-public", "landfall/ui/leak.py", "def f():\n    from functions.planning.catalog import Catalog\n"),
        ("landfall-public", "landfall/leak.py", "from functions.records.retries import retry_request\n"),
        ("deploy", "deploy/gcp/leak.py", "from functions.ingest import routes\n"),
        ("functions", "functions/planning/leak.py", "import torch\n"),
        ("trainer", "trainer/leak.py", "from functions.settings import get_settings\n"),
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
