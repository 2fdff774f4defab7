"""`google.cloud.aiplatform.v1.ModelService`: Vertex AI Model Registry models and their versions.

A model is `projects/P/locations/L/models/ID`; each upload into it (`parent_model`) adds a version, numbered "1",
"2", ... and never reused. A version is a whole `Model` message (name without `@`, its own `version_id`,
`version_aliases`, `version_create_time`, `version_update_time`, labels, description, metadata, artifact_uri,
container_spec, ...): GetModel answers `models/ID` (the version holding the `default` alias), `models/ID@2` and
`models/ID@ALIAS`. The first version gets `default`; an alias is unique within a model, so adding one another
version holds moves it (Google: "If you apply an existing alias that is used in another model version, the alias is
removed from that version", https://cloud.google.com/vertex-ai/docs/model-registry/model-alias).

Each model is one JSON file (`DIR/models/<project>/<location>/<id>.json`: the next version number and every
version as proto JSON), written atomically under one lock, so the registry survives an emulator restart.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import grpc
from google.cloud.aiplatform_v1.types import (
    DeleteModelRequest,
    DeleteModelVersionRequest,
    DeleteOperationMetadata,
    GetModelRequest,
    ListModelsRequest,
    ListModelsResponse,
    ListModelVersionsRequest,
    ListModelVersionsResponse,
    MergeVersionAliasesRequest,
    Model,
    UpdateModelRequest,
    UploadModelOperationMetadata,
    UploadModelRequest,
    UploadModelResponse,
)
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from deploy.vertex_emulator.filters import MODEL_FIELDS, VERSION_FIELDS, FilterError, parse_filter
from deploy.vertex_emulator.operations import OperationStore, generic_metadata
from deploy.vertex_emulator.paging import PageTokenError, page_in_order
from deploy.vertex_emulator.rpc import RpcError, parse_parent
from deploy.vertex_emulator.validation import MAX_DISPLAY_NAME, FieldError, check_labels, format_errors
from deploy.vertex_emulator.wellknown import time_of, timestamp

SERVICE = "google.cloud.aiplatform.v1.ModelService"
DEFAULT_ALIAS = "default"
MODEL_ID = re.compile(r"[a-z_][a-z0-9_-]{0,62}")
"""UploadModelRequest.model_id: "up to 63 characters, and valid characters are [a-z0-9_-]. The first character
cannot be a number or hyphen." """
ALIAS = re.compile(r"[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]")
"""Model.version_aliases: "The format is [a-z][a-zA-Z0-9-]{0,126}[a-z0-9] to distinguish from version_id" (the
MergeVersionAliasesRequest comment also allows a trailing "-"; the stricter Model rule is kept)."""
MODEL_NAME = re.compile(r"projects/([^/@]+)/locations/([^/@]+)/models/([^/@]+)")
OUTPUT_ONLY = (
    "name",
    "version_id",
    "version_create_time",
    "version_update_time",
    "create_time",
    "update_time",
    "deployed_models",
    "etag",
    "training_pipeline",
    "supported_export_formats",
    "supported_deployment_resources_types",
    "supported_input_storage_formats",
    "supported_output_storage_formats",
    "metadata_artifact",
)
UPDATABLE = ("display_name", "description", "version_description", "labels", "version_aliases")
"""UpdateModel's update_mask paths the emulator applies (to the version the name points at)."""
ORDER_FIELDS = {
    "models": ("display_name", "create_time", "update_time"),
    "versions": ("create_time", "update_time"),
}


def copy_model(model: Model) -> Model:
    """A deep copy of a Model message."""
    # proto-plus annotates deserialize as returning Message; it returns an instance of the class it is called on.
    return cast(Model, Model.deserialize(Model.serialize(model)))


def _now() -> datetime:
    return datetime.now(UTC)


def _invalid(message: str) -> RpcError:
    return RpcError(grpc.StatusCode.INVALID_ARGUMENT, message)


@dataclass
class _Entry:
    """One registry model: its versions by id and the next version number (ids are never reused)."""

    next_version: int
    versions: dict[str, Model] = field(default_factory=dict)

    def ordered(self) -> list[Model]:
        return [self.versions[key] for key in sorted(self.versions, key=int)]

    def holder(self, alias: str) -> Model | None:
        return next((v for v in self.versions.values() if alias in v.version_aliases), None)


@dataclass(frozen=True)
class _Ref:
    """A model name as a request gives it: the model, and the version id or alias after `@` ("" when none)."""

    model: str
    project: str
    location: str
    model_id: str
    version: str


def parse_model_name(name: str, what: str = "Model name") -> _Ref:
    """Read `projects/P/locations/L/models/ID[@VERSION|@ALIAS]`; INVALID_ARGUMENT otherwise."""
    base, _, version = name.partition("@")
    match = MODEL_NAME.fullmatch(base)
    if match is None or (name.count("@") and not version):
        raise _invalid(
            f'Invalid {what} "{name}": expected "projects/{{project}}/locations/{{location}}/models/{{model}}", '
            'optionally followed by "@" and a version id or alias (e.g. "@2" or "@production").'
        )
    return _Ref(base, match.group(1), match.group(2), match.group(3), version)


def _check_alias(alias: str) -> None:
    if ALIAS.fullmatch(alias) is None:
        raise _invalid(
            f'Invalid version alias "{alias}": an alias is 2 to 128 characters matching '
            "[a-z][a-zA-Z0-9-]{0,126}[a-z0-9] (it starts with a lowercase letter, so it is never a version id). "
            'Prefix it with "-" only in MergeVersionAliases, to remove it.'
        )


def _order_key(order_by: str, kind: str) -> Callable[[list[Model]], list[Model]]:
    """A sort for `order_by` ("field [asc|desc], ..."), refused with INVALID_ARGUMENT naming the supported fields."""
    allowed = ORDER_FIELDS[kind]
    terms: list[tuple[str, bool]] = []
    for part in order_by.split(","):
        words = part.split()
        if not words:
            continue
        name = {"displayName": "display_name", "createTime": "create_time", "updateTime": "update_time"}.get(
            words[0], words[0]
        )
        direction = words[1].lower() if len(words) > 1 else "asc"
        if name not in allowed or len(words) > 2 or direction not in ("asc", "desc"):
            raise _invalid(
                f'Unsupported order_by "{order_by}": use a comma-separated list of {", ".join(allowed)}, '
                'each optionally followed by "desc" (e.g. "create_time desc").'
            )
        terms.append((name, direction == "desc"))

    def sort(models: list[Model]) -> list[Model]:
        ordered = list(models)
        for name, descending in reversed(terms):
            ordered.sort(key=partial(_sort_value, name=name), reverse=descending)
        return ordered

    return sort


def _sort_value(model: Model, *, name: str) -> Any:
    if name == "display_name":
        return model.display_name
    moment = time_of(model.version_create_time if name == "create_time" else model.version_update_time)
    return moment or datetime.min.replace(tzinfo=UTC)


def _model_created(model: Model) -> datetime:
    return time_of(model.create_time) or datetime.min.replace(tzinfo=UTC)


class ModelService:
    """The ModelService RPCs; each takes a request message and returns the response message."""

    def __init__(self, state_dir: Path, operations: OperationStore | None = None) -> None:
        self._folder = Path(state_dir) / "models"
        self._folder.mkdir(parents=True, exist_ok=True)
        self.operations = operations or OperationStore(state_dir)
        self._lock = threading.Lock()
        self._models: dict[str, _Entry] = {}
        self._last_id = 0
        for path in sorted(self._folder.glob("*/*/*.json")):
            document = json.loads(path.read_text())
            versions = [
                cast(Model, Model.from_json(json.dumps(v), ignore_unknown_fields=True)) for v in document["versions"]
            ]
            if not versions:
                continue
            entry = _Entry(int(document["next_version"]), {v.version_id: v for v in versions})
            self._models[versions[0].name] = entry
            model_id = versions[0].name.rsplit("/", 1)[-1]
            if model_id.isdigit():
                self._last_id = max(self._last_id, int(model_id))

    # -- storage ----------------------------------------------------------------------------------------

    def _path(self, model_name: str) -> Path:
        ref = parse_model_name(model_name)
        return self._folder / quote(ref.project, safe="") / quote(ref.location, safe="") / f"{ref.model_id}.json"

    def _write(self, model_name: str) -> None:
        """Persist one model (its file disappears when it has no versions left). Call under the lock."""
        path = self._path(model_name)
        entry = self._models.get(model_name)
        if entry is None or not entry.versions:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "next_version": entry.next_version,
            "versions": [json.loads(Model.to_json(v, use_integers_for_enums=False)) for v in entry.ordered()],
        }
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(document, indent=1))
        os.replace(tmp, path)

    def _new_id(self) -> str:
        """A numeric model id like Vertex's: microseconds since the epoch, strictly increasing."""
        self._last_id = max(self._last_id + 1, time.time_ns() // 1000)
        return str(self._last_id)

    def _entry(self, ref: _Ref, name: str) -> _Entry:
        entry = self._models.get(ref.model)
        if entry is None:
            raise RpcError(
                grpc.StatusCode.NOT_FOUND,
                f'Model "{ref.model}" does not exist (asked for "{name}"). Upload it with UploadModel, or find its '
                "name with ListModels.",
            )
        return entry

    def _version(self, entry: _Entry, ref: _Ref) -> Model:
        wanted = ref.version or DEFAULT_ALIAS
        if wanted.isdigit():
            found = entry.versions.get(wanted)
            if found is None:
                raise RpcError(
                    grpc.StatusCode.NOT_FOUND,
                    f'Model "{ref.model}" has no version {wanted}; its versions are '
                    f"{', '.join(entry.versions)}. ListModelVersions lists them.",
                )
            return found
        holder = entry.holder(wanted)
        if holder is None:
            aliases = sorted({a for v in entry.versions.values() for a in v.version_aliases})
            raise RpcError(
                grpc.StatusCode.NOT_FOUND,
                f'No version of model "{ref.model}" holds the alias "{wanted}"; its aliases are '
                f"{', '.join(aliases)}. Add it with MergeVersionAliases.",
            )
        return holder

    def _exact_version(self, name: str, method: str) -> tuple[_Ref, _Entry, Model]:
        """The version a MergeVersionAliases or DeleteModelVersion name gives after "@": Vertex documents a version
        id there, and the SDK's ModelRegistry also sends an alias (`delete_version("production")`), so both work."""
        ref = parse_model_name(name)
        if not ref.version:
            raise _invalid(
                f'{method} acts on one version: name it "{ref.model}@VERSION_ID" (or "@ALIAS"); found "{name}".'
            )
        entry = self._entry(ref, name)
        return ref, entry, self._version(entry, ref)

    def _move_aliases(self, entry: _Entry, target: Model, aliases: list[str], moment: datetime) -> None:
        """Give `target` the aliases, taking each from the version that held it."""
        for alias in aliases:
            holder = entry.holder(alias)
            if holder is not None and holder.version_id != target.version_id:
                holder.version_aliases = [a for a in holder.version_aliases if a != alias]
                holder.version_update_time = timestamp(moment)
            if alias not in target.version_aliases:
                target.version_aliases.append(alias)

    # -- RPCs -------------------------------------------------------------------------------------------

    def upload_model(self, request: UploadModelRequest) -> operations_pb2.Operation:
        project, location = parse_parent(request.parent)
        model = copy_model(request.model)
        errors = _check_upload(request, model)
        if errors:
            raise _invalid(format_errors(errors))
        for alias in model.version_aliases:
            _check_alias(alias)
        parent = f"projects/{project}/locations/{location}"
        moment = _now()
        with self._lock:
            if request.parent_model:
                ref = parse_model_name(request.parent_model, "parent_model")
                if ref.version or f"projects/{ref.project}/locations/{ref.location}" != parent:
                    raise _invalid(
                        f'parent_model "{request.parent_model}" must name a model (no "@version") in the parent '
                        f'"{parent}".'
                    )
                if request.model_id and request.model_id != ref.model_id:
                    raise _invalid(
                        f'model_id "{request.model_id}" differs from the id of parent_model "{ref.model}": '
                        "leave model_id empty when uploading a new version."
                    )
                entry = self._entry(ref, request.parent_model)
                model_name = ref.model
                first = entry.versions[min(entry.versions, key=int)]
                created = first.create_time
            else:
                model_id = request.model_id or self._new_id()
                model_name = f"{parent}/models/{model_id}"
                if model_name in self._models:
                    raise RpcError(
                        grpc.StatusCode.ALREADY_EXISTS,
                        f'Model "{model_name}" already exists. To add a version to it, upload with parent_model '
                        f'"{model_name}"; to make a new model, choose another model_id or leave it empty.',
                    )
                entry = _Entry(next_version=1)
                created = timestamp(moment)
            aliases = list(dict.fromkeys(model.version_aliases))
            if not entry.versions and DEFAULT_ALIAS not in aliases:
                aliases.insert(0, DEFAULT_ALIAS)
            for output_only in OUTPUT_ONLY:
                model.__delattr__(output_only)
            version_id = str(entry.next_version)
            model.name = model_name
            model.version_id = version_id
            model.version_aliases = []
            model.create_time = created
            model.update_time = timestamp(moment)
            model.version_create_time = timestamp(moment)
            model.version_update_time = timestamp(moment)
            entry.versions[version_id] = model
            entry.next_version += 1
            self._move_aliases(entry, model, aliases, moment)
            self._models[model_name] = entry
            self._write(model_name)
        return self.operations.record(
            model_name,
            UploadModelOperationMetadata.pb(UploadModelOperationMetadata(generic_metadata=generic_metadata(moment))),
            UploadModelResponse.pb(UploadModelResponse(model=model_name, model_version_id=version_id)),
        )

    def get_model(self, request: GetModelRequest) -> Model:
        ref = parse_model_name(request.name)
        with self._lock:
            return copy_model(self._version(self._entry(ref, request.name), ref))

    def list_models(self, request: ListModelsRequest) -> ListModelsResponse:
        project, location = parse_parent(request.parent)
        prefix = f"projects/{project}/locations/{location}/models/"
        sort = _order_key(request.order_by, "models")
        try:
            matches = parse_filter(request.filter, MODEL_FIELDS)
            with self._lock:
                defaults = [
                    copy_model(entry.holder(DEFAULT_ALIAS) or entry.ordered()[-1])
                    for name, entry in self._models.items()
                    if name.startswith(prefix) and entry.versions
                ]
            chosen, token = page_in_order(
                sort(sorted((m for m in defaults if matches(m)), key=lambda m: (_model_created(m), m.name))),
                request_text=f"{request.filter}\n{request.order_by}",
                page_size=request.page_size,
                page_token=request.page_token,
                method="ListModels",
            )
        except (FilterError, PageTokenError) as error:
            raise _invalid(str(error)) from None
        return ListModelsResponse(models=chosen, next_page_token=token)

    def list_model_versions(self, request: ListModelVersionsRequest) -> ListModelVersionsResponse:
        ref = parse_model_name(request.name)
        if ref.version:
            raise _invalid(
                f'ListModelVersions takes the model name without "@": "{ref.model}"; found "{request.name}".'
            )
        sort = _order_key(request.order_by, "versions")
        try:
            matches = parse_filter(request.filter, VERSION_FIELDS)
            with self._lock:
                versions = [copy_model(v) for v in self._entry(ref, request.name).ordered()]
            chosen, token = page_in_order(
                sort([v for v in versions if matches(v)]),
                request_text=f"{request.filter}\n{request.order_by}",
                page_size=request.page_size,
                page_token=request.page_token,
                method="ListModelVersions",
            )
        except (FilterError, PageTokenError) as error:
            raise _invalid(str(error)) from None
        return ListModelVersionsResponse(models=chosen, next_page_token=token)

    def merge_version_aliases(self, request: MergeVersionAliasesRequest) -> Model:
        if not request.version_aliases:
            raise _invalid('version_aliases is empty: list the aliases to add, and "-alias" for those to remove.')
        added: list[str] = []
        removed: list[str] = []
        for text in request.version_aliases:
            alias = text.removeprefix("-")
            _check_alias(alias)
            (removed if text.startswith("-") else added).append(alias)
        # "Adding and deleting the same alias in the request is not recommended, and the 2 operations will be
        # cancelled out."
        both = set(added) & set(removed)
        added = [a for a in dict.fromkeys(added) if a not in both]
        removed = [a for a in dict.fromkeys(removed) if a not in both]
        if DEFAULT_ALIAS in removed:
            raise _invalid(
                'The "default" alias cannot be removed: one version of a model holds it at all times. Move it by '
                'adding "default" to another version.'
            )
        moment = _now()
        with self._lock:
            ref, entry, version = self._exact_version(request.name, "MergeVersionAliases")
            self._move_aliases(entry, version, added, moment)
            version.version_aliases = [a for a in version.version_aliases if a not in removed]
            version.version_update_time = timestamp(moment)
            self._write(ref.model)
            return copy_model(version)

    def update_model(self, request: UpdateModelRequest) -> Model:
        paths = list(request.update_mask.paths)
        unknown = [p for p in paths if p not in UPDATABLE]
        if not paths or unknown:
            raise _invalid(
                f"update_mask must list the fields to change, among {', '.join(UPDATABLE)}; "
                f"found {', '.join(paths) or 'none'}."
            )
        change = request.model
        errors = check_labels(dict(change.labels)) if "labels" in paths else []
        if "display_name" in paths and not 0 < len(change.display_name) <= MAX_DISPLAY_NAME:
            errors.append(FieldError("display_name", f"The display name must be 1 to {MAX_DISPLAY_NAME} characters."))
        if errors:
            raise _invalid(format_errors(errors))
        aliases = list(dict.fromkeys(change.version_aliases))
        for alias in aliases if "version_aliases" in paths else []:
            _check_alias(alias)
        moment = _now()
        with self._lock:
            ref = parse_model_name(change.name)
            entry = self._entry(ref, change.name)
            version = self._version(entry, ref)
            if "version_aliases" in paths and DEFAULT_ALIAS in version.version_aliases and DEFAULT_ALIAS not in aliases:
                raise _invalid('The "default" alias cannot be removed: move it by giving another version "default".')
            # Every check is done: nothing below can fail half way.
            for path in paths:
                if path == "labels":
                    version.labels = dict(change.labels)
                elif path == "version_aliases":
                    version.version_aliases = []
                    self._move_aliases(entry, version, aliases, moment)
                else:
                    setattr(version, path, getattr(change, path))
            version.version_update_time = timestamp(moment)
            version.update_time = timestamp(moment)
            self._write(ref.model)
            return copy_model(version)

    def delete_model_version(self, request: DeleteModelVersionRequest) -> operations_pb2.Operation:
        moment = _now()
        with self._lock:
            ref, entry, version = self._exact_version(request.name, "DeleteModelVersion")
            if len(entry.versions) == 1:
                raise RpcError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f'Version {version.version_id} is the only version of model "{ref.model}"; deleting the only '
                    "version is not allowed. Delete the model with DeleteModel instead.",
                )
            if version.version_aliases:
                aliases = ", ".join(version.version_aliases)
                hint = (
                    'move "default" to another version with MergeVersionAliases'
                    if DEFAULT_ALIAS in version.version_aliases
                    else 'remove them with MergeVersionAliases ("-alias")'
                )
                raise RpcError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f'Version {version.version_id} of model "{ref.model}" holds the aliases {aliases} and cannot be '
                    f"deleted: {hint} first.",
                )
            del entry.versions[version.version_id]
            self._write(ref.model)
        return self._deleted(ref.model, moment)

    def delete_model(self, request: DeleteModelRequest) -> operations_pb2.Operation:
        ref = parse_model_name(request.name)
        if ref.version:
            raise _invalid(
                f'DeleteModel takes the model name without "@" ("{ref.model}"); delete one version with '
                "DeleteModelVersion."
            )
        moment = _now()
        with self._lock:
            entry = self._entry(ref, request.name)
            entry.versions.clear()
            self._write(ref.model)
            del self._models[ref.model]
        return self._deleted(ref.model, moment)

    def _deleted(self, model_name: str, moment: datetime) -> operations_pb2.Operation:
        return self.operations.record(
            model_name,
            DeleteOperationMetadata.pb(DeleteOperationMetadata(generic_metadata=generic_metadata(moment))),
            empty_pb2.Empty(),
        )

    def get_operation(self, request: operations_pb2.GetOperationRequest) -> operations_pb2.Operation:
        operation = self.operations.get(request.name)
        if operation is None:
            raise RpcError(
                grpc.StatusCode.NOT_FOUND,
                f'Operation "{request.name}" does not exist: pass the name of an operation this emulator returned.',
            )
        return operation


def _check_upload(request: UploadModelRequest, model: Model) -> list[FieldError]:
    """UploadModel's INVALID_ARGUMENT checks, every problem listed as CreateCustomJob lists them."""
    errors: list[FieldError] = []
    if request.model_id and MODEL_ID.fullmatch(request.model_id) is None:
        errors.append(
            FieldError(
                "model_id",
                f'Invalid model_id "{request.model_id}": up to 63 characters of [a-z0-9_-], the first neither a '
                "digit nor a hyphen.",
            )
        )
    if not model.display_name:
        errors.append(FieldError("model.display_name", "The display name of the Model is required."))
    elif len(model.display_name) > MAX_DISPLAY_NAME:
        errors.append(
            FieldError("model.display_name", f"The display name must be at most {MAX_DISPLAY_NAME} characters.")
        )
    errors.extend(FieldError(f"model.{e.field}", e.message) for e in check_labels(dict(model.labels)))
    if model.artifact_uri and not model.artifact_uri.startswith("gs://"):
        errors.append(
            FieldError(
                "model.artifact_uri",
                f'"{model.artifact_uri}" is not a Cloud Storage folder: give the gs:// path of the model\'s files.',
            )
        )
    if "container_spec" in model and not model.container_spec.image_uri:
        errors.append(
            FieldError("model.container_spec.image_uri", "A container_spec needs the image_uri of its serving image.")
        )
    return errors
