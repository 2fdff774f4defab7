"""The CLI and the dashboard read through one read side (landfall/queries/) and print through one module of words
(landfall/words.py): no other module of landfall/ holds a Firestore client, and only landfall/uploads.py besides
holds a Storage client (the layers and the functions' public surface are pyproject.toml's import contracts)."""

from __future__ import annotations

import ast
from pathlib import Path

LANDFALL = Path(__file__).resolve().parents[2] / "landfall"
FIRESTORE = ("google.cloud.firestore", "google.cloud.firestore_v1")
STORAGE = ("google.cloud.storage",)
CLIENT_NAMES = {"firestore": FIRESTORE, "firestore_v1": FIRESTORE, "storage": STORAGE}
FACADE_CLIENTS = {"firestore_client": FIRESTORE, "storage_client": STORAGE}


def clients_imported(path: Path) -> set[str]:
    """The Firestore and Storage modules a file imports, however it names them (`from google.cloud import
    firestore`, `import google.cloud.storage`, functions.operations' firestore_client and storage_client)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(FIRESTORE + STORAGE)}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(FIRESTORE + STORAGE):
                found.add(node.module)
            elif node.module == "google.cloud":
                found |= {CLIENT_NAMES[a.name][0] for a in node.names if a.name in CLIENT_NAMES}
            elif node.module.startswith("functions."):
                found |= {FACADE_CLIENTS[a.name][0] for a in node.names if a.name in FACADE_CLIENTS}
    return found


def test_only_the_read_side_holds_a_firestore_client_and_only_uploads_a_storage_client() -> None:
    holders: dict[str, set[str]] = {}
    for path in sorted(LANDFALL.rglob("*.py")):
        found = clients_imported(path)
        if found:
            holders[path.relative_to(LANDFALL.parent).as_posix()] = found
    for module, found in holders.items():
        if module.startswith("landfall/queries/"):
            assert not found & set(STORAGE), (
                f"{module} holds a Storage client: objects are written through landfall/uploads.py"
            )
        elif module == "landfall/uploads.py":
            assert found <= set(STORAGE), f"{module} holds {found}: it writes objects only"
        else:
            raise AssertionError(
                f"{module} imports {', '.join(sorted(found))}: the CLI and the dashboard read Firestore through "
                "landfall/queries/ and write objects through landfall/uploads.py"
            )
    assert any(m.startswith("landfall/queries/") for m in holders), "the read side reads Firestore"
    assert "landfall/uploads.py" in holders


def test_the_check_sees_each_way_of_importing_a_client(tmp_path: Path) -> None:
    for source, expected in (
        ("from google.cloud import firestore\n", "google.cloud.firestore"),
        ("def f():\n    from google.cloud.firestore_v1.base_query import FieldFilter\n", "google.cloud.firestore_v1"),
        ("import google.cloud.storage\n", "google.cloud.storage"),
        ("from functions.operations import firestore_client\n", "google.cloud.firestore"),
        ("from functions.gcp.clients import storage_client\n", "google.cloud.storage"),
    ):
        module = tmp_path / "leak.py"
        module.write_text(source)
        assert any(name.startswith(expected) for name in clients_imported(module)), source
    (tmp_path / "fine.py").write_text("from google.cloud import pubsub_v1\nfrom landfall import queries\n")
    assert clients_imported(tmp_path / "fine.py") == set()


def test_the_cli_and_the_dashboard_print_through_the_same_words() -> None:
    """The dashboard's views and the CLI's run, runs, teams and models commands take their labels from words.py;
    neither defines its own money, duration or GPU label."""
    for module in ("ui/views.py", "ui/pages.py", "commands/runs.py", "commands/teams.py", "commands/watch.py"):
        text = (LANDFALL / module).read_text()
        assert "from landfall.words import" in text, module
        for own in ("def _money", "def _seconds", "def duration_text", "def gpu_label", "def gpus_in_flight"):
            assert own not in text, f"{module} defines {own[4:]}: landfall/words.py says it for both"


def test_one_list_makes_the_navigation_and_the_routes() -> None:
    """Every page of PAGES is routed; the titled ones are the navigation, in the list's order, each linking to its
    section and named by its title there, in its heading and in the window's title; / leads to the first."""
    import re
    import warnings

    from landfall.ui.app import create_app
    from landfall.ui.hosts import LOOPBACK
    from landfall.ui.pages import NAVIGATION, PAGES
    from tests.fakes.ui import FakeSource, succeeded

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # starlette's notice that a later httpx is preferred
        from starlette.testclient import TestClient

    app = create_app(FakeSource([succeeded()]), frozenset(), hosts=LOOPBACK)
    routed = {getattr(route, "path", "") for route in app.routes}
    assert {page.path for page in PAGES} <= routed
    assert [title for _, title in NAVIGATION] == [page.title for page in PAGES if page.title]
    browser = TestClient(app, base_url="http://127.0.0.1:8090")
    home = browser.get("/", follow_redirects=False)
    assert home.status_code in (302, 307) and home.headers["location"] == f"/{NAVIGATION[0][0]}"
    for section, title in NAVIGATION:
        answer = browser.get(f"/{section}")
        assert answer.status_code == 200, (section, answer.text[:300])
        links = re.findall(r'<a href="/([^"]+)"( aria-current="page")?>([^<]+)</a>', answer.text)
        assert [(s, t) for s, _, t in links[: len(NAVIGATION)]] == list(NAVIGATION)
        assert (section, ' aria-current="page"', title) in links, section
        assert f"<title>{title} · Landfall</title>" in answer.text and f"<h1>{title}</h1>" in answer.text


def test_the_public_facade_names_what_the_functions_define() -> None:
    """Each name functions/operations.py publishes resolves to its module's object (a rule renamed or moved in its
    module fails here, naming it); a name it does not publish is refused with the ones it does."""
    import importlib

    import pytest

    from functions import operations

    for name, module in operations.PUBLIC.items():
        assert getattr(operations, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="its public names are"):
        operations.handler  # noqa: B018
