"""The docs agree with the code (sqlite-utils' tests/test_docs.py is the model): the architecture page names every
layer of the layers contract, README's lists (run states, failure reasons, commands) are the code's lists, every
page under docs/ is in docs/index.md, every relative link resolves, and nothing cites a tracker that does not ship
with the repository. Each list is read from its one home (pyproject.toml, the vocabulary, the state machine, the
CLI's parser), so a term added there fails here until the docs say so, and a term the docs list that the code does
not have fails too."""

from __future__ import annotations

import argparse
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from landfall.cli import build_parser
from schemas.run_record import RunState
from schemas.vocabulary import FAILURE_REASONS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"
README_MAX_LINES = 200

# Folders never scanned: version control, environments, caches, what the local stack and the tests write.
SKIPPED_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".landfall", ".mypy_cache", ".ruff_cache"}
SKIPPED_DIRS |= {".pytest_cache", "shared", "build", "dist"}
TRACKER = re.compile(r"\bissues?\s+#?[0-9]", re.IGNORECASE)
# Files whose owners remove their own tracker references in the same change as this test: empty once merged.
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def layer_modules() -> list[str]:
    """Every module named in pyproject.toml's layers contract (id `layers`), top to bottom."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "layers"]
    return [name.strip() for layer in contract["layers"] for name in re.split(r"[|:]", layer)]


def listed(text: str, label: str) -> list[str]:
    """The comma-separated names after `label` up to the sentence's full stop, e.g. README's
    "Run states (field `state`): RECEIVED, PLANNED, ... REJECTED." """
    found = re.search(re.escape(label) + r"\s*(.*?)\.(?:\s|$)", text, re.DOTALL)
    assert found, f"no list after {label!r}: the docs must list them there (README.md, docs/runs.md)"
    return [name.strip() for name in " ".join(found.group(1).split()).split(",")]


def commands() -> set[str]:
    """The `landfall` subcommands, from the CLI's own parser."""
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def text_files() -> Iterator[Path]:
    """Every .py and .md file of the repository, and the Makefile."""
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            if name.endswith((".py", ".md")) or name == "Makefile":
                yield Path(folder) / name


def doc_pages() -> list[Path]:
    """README, CONTRIBUTING, every page under docs/ and the READMEs of the trainer and the examples."""
    pages = [README, ROOT / "CONTRIBUTING.md", ROOT / "trainer" / "README.md", ROOT / "examples" / "README.md"]
    return pages + sorted(DOCS.rglob("*.md"))


@pytest.mark.parametrize("module", layer_modules())
def test_the_architecture_page_names_every_layer(module: str) -> None:
    """A layer added to the contract (or a module renamed) is described on docs/architecture.md, written as in the
    contract (`functions.gcp`)."""
    assert f"`{module}`" in ARCHITECTURE.read_text(), (
        f"docs/architecture.md does not name the layer `{module}` of pyproject.toml's layers contract; "
        "add it to the page's list of layers with what it does"
    )


def test_the_readme_is_a_front_door() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}: move detail to docs/"


@pytest.mark.parametrize("page", ["README.md", "docs/runs.md"])
def test_the_run_states_listed_are_the_state_machines(page: str) -> None:
    names = listed((ROOT / page).read_text(), "Run states (field `state`):")
    assert sorted(names) == sorted(state.value for state in RunState), (
        f"{page} lists run states {names}; schemas/run_record.py RunState has {[s.value for s in RunState]}"
    )


@pytest.mark.parametrize(
    ("page", "label"),
    [
        ("README.md", "Failure reasons (`error.reason` of a run that ended badly):"),
        ("docs/runs.md", "`error.reason` is one of"),
    ],
)
def test_the_failure_reasons_listed_are_the_vocabularys(page: str, label: str) -> None:
    names = listed((ROOT / page).read_text(), label)
    assert sorted(names) == sorted(FAILURE_REASONS), (
        f"{page} lists failure reasons {names}; schemas/vocabulary.py FAILURE_REASONS has {list(FAILURE_REASONS)}"
    )


def test_the_readme_lists_every_command_and_no_other() -> None:
    """README's table of commands (rows `| `landfall NAME ...` |`) against the CLI's parser."""
    rows = set(re.findall(r"^\| `landfall ([a-z][a-z-]*)", README.read_text(), re.MULTILINE))
    code = commands()
    assert not code - rows, f"README.md's table of commands leaves out {sorted(code - rows)}: add a row each"
    assert not rows - code, f"README.md lists {sorted(rows - code)}, which landfall's parser does not have"


def test_the_index_lists_every_page() -> None:
    index = (DOCS / "index.md").read_text()
    pages = [
        p
        for p in [*DOCS.glob("*.md"), *DOCS.glob("decisions/*.md"), *DOCS.glob("measurements/*.md")]
        if p.name != "index.md"
    ]
    missing = [str(p.relative_to(DOCS)) for p in pages if f"]({p.relative_to(DOCS)})" not in index]
    assert not missing, f"docs/index.md does not list {missing}: add each with whom it is for"


def anchors(page: Path) -> set[str]:
    """The fragment GitHub gives each heading of a page: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_resolves() -> None:
    """A link to a file names one that exists, and a link to a heading (`page.md#heading`) one the page has."""
    broken = []
    for page in doc_pages():
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            linked = page.parent / path if path else page
            if not linked.exists() or (fragment and fragment not in anchors(linked)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, f"links to nothing: {broken}"


def test_nothing_cites_a_tracker_outside_the_decisions() -> None:
    """A tracker's issue numbers do not ship with the repository: code and docs state the rule itself, or a short
    record in docs/decisions/ does."""
    found = []
    for path in text_files():
        name = path.relative_to(ROOT).as_posix()
        if name.startswith("docs/decisions/"):
            continue
        text = path.read_text(errors="replace")
        for match in TRACKER.finditer(text):
            number = text.count("\n", 0, match.start()) + 1
            found.append(f"{name}:{number}: {text.splitlines()[number - 1].strip()[:100]}")
    assert not found, "tracker references (write the rule itself, or a record in docs/decisions/):\n" + "\n".join(found)
