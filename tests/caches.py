"""Forget every per-process cache the functions keep (settings, routes, clients, stores): a test that points the
environment at other emulators calls this, or clients built for the previous ones are used (a Firestore client made
by an integration test read the integration emulator's empty database in the end-to-end tests that followed)."""

from __future__ import annotations

from types import ModuleType


def _clear_module(module: ModuleType) -> None:
    for value in vars(module).values():
        if isinstance(value, type):  # a class's cache_clear is its instances' (deploy/reloading.py ReloadingFile)
            continue
        clear = getattr(value, "cache_clear", None)
        if callable(clear) and getattr(value, "__module__", None) == module.__name__:
            clear()


def clear_function_caches() -> None:
    from functions import settings, wiring
    from functions.gcp import clients
    from functions.ingest import routes

    for module in (settings, routes, clients, wiring):
        _clear_module(module)
