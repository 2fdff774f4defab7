"""The routes' models in Vertex AI Model Registry as `landfall models` and the dashboard's models page read them:
every version of every model, or of one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from landfall.errors import CommandError, client_boundary
from schemas.errors import SchemaError
from schemas.model_version import RUN_LABEL


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


def held_decisions(
    versions: Iterable[Any], read: Callable[[list[str]], dict[str, dict[str, Any]]] | None = None
) -> dict[str, str]:
    """The promotion decision that holds now for each version (by version name), as its run records it
    (run.model.promotion): Model Registry keeps a version's labels and metadata as uploaded, so a `landfall promote`,
    a `landfall rollback` or a rival's promotion after the upload is written on the run only. The run is the one the
    version's metadata names (`run_id`), else its label; a version whose run has no readable record naming this
    version, or no decision on it, is left out (decision_text then reads the version's own). `read` gives the runs'
    stored documents by id in one call (default: landfall/queries/runs.py read_run_documents)."""
    from landfall.queries.runs import read_run_documents
    from schemas.run_record import parse_run_record

    listed = list(versions)
    run_of = {v.version_name: _run_id(v) for v in listed}
    docs = (read or read_run_documents)([r for r in run_of.values() if r])
    held: dict[str, str] = {}
    for name, run_id in run_of.items():
        doc = docs.get(run_id) if run_id else None
        if doc is None:
            continue
        try:
            model = parse_run_record(doc).model
        except SchemaError:
            continue
        if model is not None and model.promotion is not None and model.version_name == name:
            held[name] = model.promotion.decision
    return held


def _run_id(version: Any) -> str:
    """The run a version holds the model of: its metadata's `run_id` (the id itself), else its run label."""
    named = version.metadata.get("run_id")
    return named if isinstance(named, str) and named else str(version.labels.get(RUN_LABEL, ""))
