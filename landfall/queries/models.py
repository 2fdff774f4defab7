"""The routes' models in Vertex AI Model Registry as `landfall models` and the dashboard's models page read them:
every version of every model, or of one."""

from __future__ import annotations

from typing import Any

from landfall.errors import CommandError, client_boundary


def model_id(text: str) -> str:
    """A model id from NAME: an id (landfall-default-tabular-iris) or a full resource name."""
    return text.split("@", 1)[0].rsplit("/", 1)[-1]


def registry() -> Any:
    """The Model Registry the functions register into (functions.wiring)."""
    from functions.wiring import model_registry

    return model_registry()


def model_versions(name: str = "", of: Any = None) -> list[Any]:
    """Every version (ModelVersion) of the model `name` (a CommandError when it has none), or of every model when
    `name` is ""; read from the registry `of` (default: registry())."""
    found = registry() if of is None else of
    with client_boundary("list Vertex AI Model Registry models"):
        if name:
            versions: list[Any] = found.versions(model_id(name))
            if not versions:
                raise CommandError(f"no registry model {name!r}; `landfall models` lists them")
            return versions
        return [v for m in found.models() for v in found.versions(m.model_id)]
