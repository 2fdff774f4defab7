"""Vertex AI Model Registry adapter (ModelService): upload a run's model as a new version, find a version by its run
label, read versions and aliases, move an alias. Client errors become Landfall's error kinds (functions/gcp/vertex.py
translate_error). Every registry model lives in one region, the deployment's default region (docs/models.md). A
version's metadata is written and read through schemas/model_version.py stored_metadata: no NaN or Infinity is
uploaded, and a version that holds one (uploaded before the rules) reads without it instead of raising.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from functions.errors import PermanentError, TransientError
from functions.gcp.vertex import translate_error
from schemas.model_version import RUN_LABEL, VersionView, label_value, stored_metadata
from schemas.times import format_timestamp

log = logging.getLogger("landfall.models")

UPLOAD_TIMEOUT_S = 300
"""How long to wait for UploadModel's long-running operation (Google's own takes seconds to minutes)."""


def _ts(value: Any) -> str:
    try:
        return format_timestamp(value) if value is not None and value.timestamp() > 0 else ""
    except (AttributeError, OSError, ValueError):
        return ""


def _metadata(model: Any) -> dict[str, Any]:
    """Model.metadata (a protobuf Value) as JSON, as stored_metadata reads it: a value its rules leave out (NaN or
    Infinity, which protobuf's own JSON writer refuses, stored before the rules) is left out and logged; {} when
    unset or not an object."""
    pb = type(model).pb(model)
    if not pb.HasField("metadata") or pb.metadata.WhichOneof("kind") != "struct_value":
        return {}
    value, notes = stored_metadata(_json(pb.metadata.struct_value, 0))
    for note in notes:
        log.warning("model %s@%s: %s", model.name, model.version_id, note)
    return value


_DEPTH = 64
"""Levels of a Value read (stored_metadata keeps fewer): deeper ones read as null."""


def _json(value: Any, depth: int) -> Any:
    """A protobuf Struct, ListValue or Value as JSON values, numbers as they are (stored_metadata checks them)."""
    from google.protobuf import struct_pb2

    if depth > _DEPTH:
        return None
    if isinstance(value, struct_pb2.Struct):
        return {k: _json(v, depth + 1) for k, v in value.fields.items()}
    if isinstance(value, struct_pb2.ListValue):
        return [_json(v, depth + 1) for v in value.values]
    kind = value.WhichOneof("kind")
    if kind in ("struct_value", "list_value"):
        return _json(getattr(value, kind), depth)
    return None if kind in (None, "null_value") else getattr(value, kind)


def version_view(model: Any) -> VersionView:
    """A ModelService Model message (one version of it) as a VersionView."""
    name = str(model.name).split("@", 1)[0]
    return VersionView(
        model=name,
        version_id=str(model.version_id),
        display_name=str(model.display_name),
        aliases=tuple(str(a) for a in model.version_aliases),
        labels=dict(model.labels),
        artifact_uri=str(model.artifact_uri),
        version_description=str(model.version_description),
        metadata=_metadata(model),
        created_at=_ts(model.version_create_time) or _ts(model.create_time),
    )


def _translate(exc: Exception, what: str, region: str) -> Exception:
    """JobService's translation (functions/gcp/vertex.py), and an endpoint that does not serve ModelService
    (UNIMPLEMENTED) or a missing permission as permanent: the run is announced without a model, and says why."""
    from google.api_core import exceptions as gexc

    if isinstance(exc, gexc.MethodNotImplemented):
        return PermanentError(f"{what}: the Vertex AI endpoint does not serve ModelService ({exc.message})")
    return translate_error(exc, what, region)


class ModelRegistry:
    def __init__(self, project: str, region: str, client_for_region: Callable[[str], Any]) -> None:
        self._project = project
        self.region = region
        self._client = client_for_region

    @property
    def parent(self) -> str:
        return f"projects/{self._project}/locations/{self.region}"

    def model_name(self, model_id: str) -> str:
        return f"{self.parent}/models/{model_id}"

    def _call(self, what: str, call: Callable[[Any], Any]) -> Any:
        try:
            return call(self._client(self.region))
        except Exception as exc:
            raise _translate(exc, what, self.region) from exc

    def get(self, name: str) -> VersionView | None:
        """The version `name` names (MODEL, MODEL@VERSION_ID or MODEL@ALIAS); None when there is none."""
        from google.api_core import exceptions as gexc

        try:
            return version_view(self._client(self.region).get_model(name=name))
        except gexc.NotFound:
            return None
        except Exception as exc:
            raise _translate(exc, f"GetModel {name}", self.region) from exc

    def versions(self, model_id: str, *, label_filter: str = "") -> list[VersionView]:
        """Every version of the model (none when the model does not exist), optionally filtered by labels."""
        from google.api_core import exceptions as gexc

        request: dict[str, Any] = {"name": self.model_name(model_id)}
        if label_filter:
            request["filter"] = label_filter
        try:
            return [version_view(m) for m in self._client(self.region).list_model_versions(request=request)]
        except gexc.NotFound:
            return []
        except Exception as exc:
            raise _translate(exc, f"ListModelVersions {model_id}", self.region) from exc

    def find_by_run(self, model_id: str, run_id: str) -> VersionView | None:
        """The version labelled with the run, if one was uploaded (the dedupe behind exactly-once upload)."""
        found = self.versions(model_id, label_filter=f'labels.{RUN_LABEL}="{label_value(run_id)}"')
        return found[0] if found else None

    def models(self, label_filter: str = "labels.landfall-route:*") -> list[VersionView]:
        """Every registry model Landfall made (ListModels answers each model's default version)."""
        return [
            version_view(m)
            for m in self._call(
                "ListModels", lambda c: c.list_models(request={"parent": self.parent, "filter": label_filter})
            )
        ]

    def upload(self, model_id: str, model: dict[str, Any]) -> VersionView:
        """Upload `model` (a Model message as a dict) as a new version of model_id, creating the model with that id
        when it does not exist yet (a concurrent creator's AlreadyExists sends this one on as a new version)."""
        from google.api_core import exceptions as gexc

        exists = self.get(self.model_name(model_id)) is not None
        try:
            try:
                return self._upload(model_id, model, as_version=exists)
            except gexc.AlreadyExists:
                return self._upload(model_id, model, as_version=True)
        except Exception as exc:
            raise _translate(exc, f"UploadModel {model_id}", self.region) from exc

    def _upload(self, model_id: str, model: dict[str, Any], *, as_version: bool) -> VersionView:
        if isinstance(model.get("metadata"), dict):  # what the reader takes, and nothing it would leave out
            metadata, notes = stored_metadata(model["metadata"])
            for note in notes:
                log.warning("model %s: %s", model_id, note)
            model = {**model, "metadata": metadata}
        request: dict[str, Any] = {"parent": self.parent, "model": model}
        if as_version:
            request["parent_model"] = self.model_name(model_id)
        else:
            request["model_id"] = model_id
        operation = self._client(self.region).upload_model(request=request)
        response = operation.result(timeout=UPLOAD_TIMEOUT_S)
        name = f"{response.model}@{response.model_version_id}" if response.model_version_id else str(response.model)
        found = self.get(name)
        if found is None:
            raise TransientError(f"UploadModel {model_id}: the operation named {name}, which GetModel does not find")
        return found

    def set_alias(self, version_name: str, alias: str) -> VersionView:
        """Give the version `alias`; Vertex takes it off the version that held it (MergeVersionAliases)."""
        if "@" not in version_name:
            raise PermanentError(f"{version_name!r} names no version: expected MODEL@VERSION_ID")
        return version_view(
            self._call(
                f"MergeVersionAliases {version_name}",
                lambda c: c.merge_version_aliases(name=version_name, version_aliases=[alias]),
            )
        )


__all__ = ["UPLOAD_TIMEOUT_S", "ModelRegistry", "version_view"]
