"""Functions read the environment only through functions/settings.py; data files are found as package data."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from functions.settings import settings_from_env

ROOT = Path(__file__).resolve().parents[2]
BASE = {"GOOGLE_CLOUD_PROJECT": "landfall-local"}


def test_routes_file_and_storage_emulator_come_from_the_environment_once() -> None:
    plain = settings_from_env(BASE)
    assert (plain.routes_file, plain.storage_emulator_host) == ("", "")
    local = settings_from_env(
        {**BASE, "LANDFALL_ROUTES_FILE": "/tmp/routes.toml", "STORAGE_EMULATOR_HOST": "http://127.0.0.1:4443"}
    )
    assert (local.routes_file, local.storage_emulator_host) == ("/tmp/routes.toml", "http://127.0.0.1:4443")


def test_only_the_settings_module_reads_the_environment() -> None:
    readers = []
    for path in sorted((ROOT / "functions").rglob("*.py")):
        if path.name == "settings.py" and path.parent.name == "functions":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not readers, f"read these through functions.settings.Settings instead: {readers}"


def test_routes_default_to_the_settings_file_then_the_shipped_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from functions.ingest import routes

    custom = tmp_path / "routes.toml"
    custom.write_text(
        '[[routes]]\nname = "only"\nbucket = "*"\nprefix = "x/"\ntask = "causal-lm"\nmodel_preset = "gpt-tiny"\n'
    )
    settings = settings_from_env(BASE)
    monkeypatch.setattr(routes, "get_settings", lambda: dataclasses.replace(settings, routes_file=str(custom)))
    routes.load_routes.cache_clear()
    try:
        assert [r.name for r in routes.load_routes()] == ["only"]
        routes.load_routes.cache_clear()
        monkeypatch.setattr(routes, "get_settings", lambda: settings)
        assert routes.load_routes() == routes.load_routes(routes.ROUTES_FILE)
    finally:
        routes.load_routes.cache_clear()


def test_the_storage_client_is_anonymous_against_the_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    from google.auth.credentials import AnonymousCredentials

    from functions.gcp import clients

    settings = settings_from_env({**BASE, "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"})
    monkeypatch.setattr(clients, "get_settings", lambda: settings)
    clients.storage_client.cache_clear()
    try:
        assert isinstance(clients.storage_client()._credentials, AnonymousCredentials)
    finally:
        clients.storage_client.cache_clear()


@pytest.mark.parametrize(
    ("package", "name"),
    [
        ("deploy", "routes.toml"),
        ("deploy", "topology.toml"),
        ("schemas", "training_request.proto"),
        ("schemas", "data/gpus.json"),
        ("schemas", "data/model_presets.json"),
        ("functions.planning", "data/prices.json"),
    ],
)
def test_data_files_are_package_data(package: str, name: str) -> None:
    from importlib import resources

    assert resources.files(package).joinpath(name).is_file()


def test_no_loader_finds_its_data_from_its_own_path() -> None:
    for path in (
        "deploy/routes.py",
        "deploy/topology.py",
        "schemas/proto.py",
        "schemas/gpus.py",
        "schemas/model_presets.py",
        "trainer/metrics.py",
        "functions/planning/catalog.py",
        "functions/planning/quotas.py",
    ):
        source = (ROOT / path).read_text()
        assert "__file__" not in source and "find_spec" not in source, f"{path}: use importlib.resources"
