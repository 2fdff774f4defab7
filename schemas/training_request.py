"""TrainingRequest: what to train, on which dataset, under which constraints. Published on the requests topic.

On the wire it is JSON checked by the topic's Protocol Buffer schema (schemas/training_request.proto, generated from
these classes by `python -m schemas.proto`). A publisher may leave out any field but dataset.uri, task and
model.preset: parse_training_request applies the defaults below. A field the schema does not have is refused, naming
the nearest known one, as protobuf's JSON parser does (the emulator's topic carries no schema). Without an
idempotency_key the key is derived from the request's content (`content:` + a hash), so redeliveries of one message
are one run; publishing the same content again is the same run too, so set a key (or created_at) to run the same
request twice.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from schemas import json_text
from schemas.data_objects import DataObject, objects_digest, parse_data_objects, read_digest
from schemas.errors import SchemaError
from schemas.fields import Reader, names_of
from schemas.plain import as_dict
from schemas.request_labels import check_labels
from schemas.trainer_spec import TrainerSpec, WorkloadSpec, parse_trainer, parse_workload
from schemas.uris import parse_gcs_uri
from schemas.vocabulary import FLEX_START_POLICIES, SPOT_POLICIES, TASKS, parse_prefer

SCHEMA_VERSION = 1
SOURCE_KINDS = ("gcs-marker", "gcs-manifest", "quiet-period", "retrain", "retry", "direct")
MAX_KEY_CHARS = 512
"""The longest idempotency_key a request may carry."""
RETRY_MARK = "~retry-"
"""Separates a key from its retry number in a retry's key (retry_key)."""
MAX_MESSAGE_BYTES = 256 * 1024

RUN_ID_ATTRIBUTE = "run_id"
"""The Pub/Sub attribute Landfall sets, to the request's run id, when it publishes a TrainingRequest again for a run
that exists (a woken run: functions/records/team_wakes.py): the dispatcher then reads the run first instead of
creating it (a create that would be refused). Set by anyone, it changes only which call the dispatcher makes first."""


@dataclass(frozen=True)
class DatasetRef:
    uri: str
    """gs://BUCKET/PREFIX/ of the dataset (a prefix, ending in /)."""
    object_count: int = 0
    """Data objects under the prefix (markers and control files excluded); 0 when unknown."""
    total_bytes: int = 0
    """Sum of their sizes in bytes; 0 when unknown."""
    formats: tuple[str, ...] = ()
    """File formats seen, e.g. ("csv",)."""
    objects: tuple[DataObject, ...] = ()
    """The version's data objects (names relative to uri, generations, sizes) as ingest measured them: the trainer
    reads exactly these, at these generations. Empty when the list is past INLINE_LIST_BYTES (objects_digest then
    names it) or the publisher sent none (the trainer reads the folder as it finds it)."""
    objects_digest: str = ""
    """schemas/data_objects.py objects_digest() of the version's list; "" when the publisher sent none."""

    @property
    def bucket(self) -> str:
        return self.uri.removeprefix("gs://").split("/", 1)[0]

    @property
    def prefix(self) -> str:
        rest = self.uri.removeprefix("gs://").split("/", 1)
        return rest[1] if len(rest) > 1 else ""


@dataclass(frozen=True)
class ModelSpec:
    preset: str
    """A name from schemas/data/model_presets.json, e.g. "mlp-small" or "gpt-124m". With an own trainer it is
    optional and names a shape to plan for, not weights ("my model is shaped like gpt-1.3b")."""
    label_column: str = "label"
    """Tabular tasks: the column holding the target. Ignored for causal-lm."""


@dataclass(frozen=True)
class Hyperparameters:
    epochs: int = 5
    batch_size: int = 64
    """Global batch size (across every process)."""
    learning_rate: float = 0.01
    seed: int = 0
    max_steps: int = 0
    """Stop after this many optimizer steps; 0 = run every epoch."""
    checkpoint_every_steps: int = 0
    """0 = the trainer's default interval."""
    extra: dict[str, str] = field(default_factory=dict)
    """Further trainer flags, passed as --hparam KEY=VALUE."""


@dataclass(frozen=True)
class Constraints:
    deadline: str = ""
    """RFC 3339 time the run must end by; "" = none."""
    budget_usd: float = 0.0
    """Most the run may cost; 0 = no budget."""
    regions: tuple[str, ...] = ()
    """Allowed Vertex regions; empty = any the planner knows."""
    gpu_allowlist: tuple[str, ...] = ()
    """Allowed accelerator types (e.g. NVIDIA_H100_80GB); empty = any."""
    max_gpus: int = 0
    """Most GPUs in total; 0 = no cap."""
    spot: str = "allowed"
    """One of vocabulary.SPOT_POLICIES; "allowed" takes Spot when cheaper, counting preemption overhead."""
    flex_start: str = "never"
    """One of vocabulary.FLEX_START_POLICIES; "allowed" lets the job wait for GPUs (Vertex FLEX_START) within the
    deadline, on the GPU kinds Vertex offers it for."""
    machine_type: str = ""
    """Pin the Vertex machine type (e.g. a3-highgpu-2g); "" = the planner chooses."""
    accelerator_count: int = 0
    """Pin the GPUs per machine; 0 = the planner chooses (fixed by the machine type except on N1)."""
    replica_count: int = 0
    """Pin the number of machines (nodes); 0 = the planner chooses."""
    reservation: str = ""
    """Run on this Compute Engine reservation (a name the deployment declares in LANDFALL_RESERVATIONS): its machines
    count as already paid for and the job consumes it through reservationAffinity; "" = none named (a declared
    reservation the request can use is still preferred)."""
    prefer: str = ""
    """The objective among plans that meet every limit above: "cheapest", "fastest", or a value of time in US
    dollars per hour as a string ("25": least cost + $25 x wall hours, start-up included); "" = the default value
    of time (functions/planning/data/assumptions.json, docs/planning.md, "How the objective is chosen")."""
    tensor_parallel: int = 0
    """Pin the tensor-parallel degree inside each machine (1 = none); 0 = the planner chooses."""
    pipeline_parallel: int = 0
    """Pin the pipeline stages across machines (1 = none); 0 = the planner chooses."""


@dataclass(frozen=True)
class RequestSource:
    kind: str = "direct"
    """gcs-marker | gcs-manifest | quiet-period | retrain (`landfall retrain`: the same content again, on purpose) |
    retry (`landfall retry`: a failed or cancelled run's request again) | direct."""
    object: str = ""
    """gs:// URI of the object that completed the dataset, for ingest-made requests."""
    generation: str = ""
    """Its generation."""
    event_id: str = ""
    """The notification's id (Pub/Sub message id or CloudEvent id)."""


@dataclass(frozen=True)
class TrainingRequest:
    idempotency_key: str
    """One key per dataset version (ingest: bucket, prefix and the completing object's generation). Requests with
    the same key are the same run: redeliveries are no-ops."""
    dataset: DatasetRef
    task: str
    """One of vocabulary.TASKS; "" allowed with an own trainer (the team's code decides what it learns)."""
    model: ModelSpec
    hyperparameters: Hyperparameters = field(default_factory=Hyperparameters)
    constraints: Constraints = field(default_factory=Constraints)
    source: RequestSource = field(default_factory=RequestSource)
    created_at: str = ""
    """RFC 3339 time the request was made; "" when the publisher did not say."""
    labels: dict[str, str] = field(default_factory=dict)
    """The team's labels, copied onto the run and (where valid) the Vertex job: never Landfall's own (`landfall`,
    `landfall-*`), at most request_labels.MAX_REQUEST_LABELS."""
    schema_version: int = SCHEMA_VERSION
    retry_of: str = ""
    """The run this request retries (`landfall retry`: its key is retry_key of that run's key); "" for a first run."""
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    """The team's own training code (schemas/trainer_spec.py); empty = Landfall's built-in trainer."""
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    """The size of an own trainer's work, for the planner; all zero = not given."""
    checkpoint_lineage: str = ""
    """The run whose checkpoint folder this run resumes from and writes to (a retry's: the first run of its line,
    `runs/RUN/checkpoints/`), so that a retry goes on from the newest checkpoint of every run before it; "" = the run's
    own folder (a first run, or `landfall retry --from-scratch`). Only with retry_of."""

    @property
    def run_id(self) -> str:
        """The run's id: derived from the idempotency key, so every delivery of one request names one run."""
        return run_id_for(self.idempotency_key)

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON form: every field present, defaults applied; `trainer` and `workload` only when set
        (a built-in request reads as it did before they existed), and so the fields added since (prefer, the
        layout pins, workload.parallelism, checkpoint_lineage): a request's content key stays what it was."""
        data = as_dict(self)
        _lists(data)
        for name, empty in (("trainer", TrainerSpec()), ("workload", WorkloadSpec())):
            if getattr(self, name) == empty:
                del data[name]
        if not self.constraints.prefer:  # the default objective: absent, as before the field existed
            del data["constraints"]["prefer"]
        for pin in ("tensor_parallel", "pipeline_parallel"):  # the planner's choice: absent, as before the pins
            if not getattr(self.constraints, pin):
                del data["constraints"][pin]
        if "workload" in data and not self.workload.parallelism:  # data parallelism only: as before the field
            del data["workload"]["parallelism"]
        if not self.checkpoint_lineage:  # absent, as before the field existed
            del data["checkpoint_lineage"]
        return data

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode()


def _lists(node: Any) -> None:
    """asdict keeps tuples; JSON and Firestore want lists."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, tuple):
                node[key] = list(value)
            else:
                _lists(value)


def run_id_for(idempotency_key: str) -> str:
    return "run-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:20]


def retry_key(idempotency_key: str) -> str:
    """The key of the next retry of the run with this key: `KEY~retry-1`, and for a retry's own key the number after
    (`KEY~retry-1` -> `KEY~retry-2`), so every retry of one request counts from its first key. Deterministic, so two
    `landfall retry` calls at once name one run. A key that would pass MAX_KEY_CHARS becomes `retry:` + its hash."""
    base, mark, number = idempotency_key.rpartition(RETRY_MARK)
    if mark and number.isdigit():
        nth = int(number) + 1
    else:
        base, nth = idempotency_key, 1
    key = f"{base}{RETRY_MARK}{nth}"
    if len(key) > MAX_KEY_CHARS:
        key = f"retry:{hashlib.sha256(base.encode()).hexdigest()[:40]}{RETRY_MARK}{nth}"
    return key


def parse_training_request(raw: bytes | str | dict[str, Any]) -> TrainingRequest:
    """Decode and check the structure of a TrainingRequest. Raises SchemaError naming the first bad field.

    Structural checks only (unknown fields, URI grammar: schemas/uris.py, requirement lines, Landfall's labels:
    schemas/request_labels.py); rules that need configuration or the clock (known presets, allowed buckets and
    images, deadline in the future) are the dispatcher's (functions/dispatch/request_rules.py).
    """
    if isinstance(raw, bytes | str):
        if len(raw) > MAX_MESSAGE_BYTES:
            raise SchemaError(f"message is {len(raw)} bytes; a TrainingRequest is at most {MAX_MESSAGE_BYTES}")
        try:
            data = json_text.loads(raw)
        except json_text.JsonTextError as exc:
            raise SchemaError(
                f"message is not JSON ({exc}); publish a TrainingRequest JSON object, see "
                "schemas/examples/training_request.json"
            ) from exc
    else:
        data = raw
    r = Reader(data).only(names_of(TrainingRequest))
    version = r.integer("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise SchemaError(
            f"version {version} is not supported; this Landfall reads version {SCHEMA_VERSION}", field="schema_version"
        )
    key = r.string("idempotency_key", "", max_len=MAX_KEY_CHARS)
    if "idempotency_key" in r.data and not key.strip():
        raise SchemaError(
            "must not be empty: it names the run, so choose one key per dataset version", field="idempotency_key"
        )
    d = r.obj("dataset").only(names_of(DatasetRef))
    uri = d.string("uri", max_len=1100)
    parse_gcs_uri(uri, "dataset.uri", folder=True)
    dataset = DatasetRef(
        uri=uri,
        object_count=d.integer("object_count", 0, minimum=0),
        total_bytes=d.integer("total_bytes", 0, minimum=0),
        formats=d.strings("formats", ()),
        objects=parse_data_objects(d, "objects"),
        objects_digest=read_digest(d, "objects_digest"),
    )
    if dataset.objects:
        if not dataset.objects_digest:
            raise SchemaError(
                "is required with dataset.objects: the digest of the list (schemas/data_objects.py)",
                field="dataset.objects_digest",
            )
        if objects_digest(dataset.objects) != dataset.objects_digest:
            raise SchemaError(
                "does not match dataset.objects; send the list ingest cut with its digest, or neither",
                field="dataset.objects_digest",
            )
    trainer = parse_trainer(r.optional_obj("trainer"))
    if trainer.builtin:
        m = r.obj("model").only(names_of(ModelSpec))
        preset = m.string("preset", max_len=128)
    else:  # an own trainer: the preset only names a shape to plan for
        m = r.obj("model", {}).only(names_of(ModelSpec))
        preset = m.string("preset", "", max_len=128)
    model = ModelSpec(preset=preset, label_column=m.string("label_column", "label"))
    h = r.obj("hyperparameters", {}).only(names_of(Hyperparameters))
    hyper = Hyperparameters(
        epochs=h.integer("epochs", 5, minimum=1),
        batch_size=h.integer("batch_size", 64, minimum=1),
        learning_rate=h.number("learning_rate", 0.01),
        seed=h.integer("seed", 0, minimum=0),
        max_steps=h.integer("max_steps", 0, minimum=0),
        checkpoint_every_steps=h.integer("checkpoint_every_steps", 0, minimum=0),
        extra=h.string_map("extra", {}),
    )
    if hyper.learning_rate <= 0:
        raise SchemaError(f"must be > 0, got {hyper.learning_rate}", field="hyperparameters.learning_rate")
    c = r.obj("constraints", {}).only(names_of(Constraints))
    constraints = Constraints(
        deadline=c.timestamp("deadline", "", allow_empty=True),
        budget_usd=c.number("budget_usd", 0.0, minimum=0.0),
        regions=c.strings("regions", ()),
        gpu_allowlist=c.strings("gpu_allowlist", ()),
        max_gpus=c.integer("max_gpus", 0, minimum=0),
        spot=c.string("spot", "allowed", choices=SPOT_POLICIES),
        flex_start=c.string("flex_start", "never", choices=FLEX_START_POLICIES),
        machine_type=c.string("machine_type", "", max_len=64),
        accelerator_count=c.integer("accelerator_count", 0, minimum=0),
        replica_count=c.integer("replica_count", 0, minimum=0),
        tensor_parallel=c.integer("tensor_parallel", 0, minimum=0),
        pipeline_parallel=c.integer("pipeline_parallel", 0, minimum=0),
        reservation=c.string("reservation", "", max_len=64),
        prefer=_prefer(c),
    )
    s = r.obj("source", {}).only(names_of(RequestSource))
    source = RequestSource(
        kind=s.string("kind", "direct", choices=SOURCE_KINDS),
        object=s.string("object", ""),
        generation=s.string("generation", ""),
        event_id=s.string("event_id", ""),
    )
    request = TrainingRequest(
        idempotency_key=key,
        dataset=dataset,
        task=r.string("task", choices=TASKS) if trainer.builtin else r.string("task", "", choices=("", *TASKS)),
        model=model,
        hyperparameters=hyper,
        constraints=constraints,
        source=source,
        created_at=r.timestamp("created_at", "", allow_empty=True),
        labels=check_labels(r.string_map("labels", {}), "labels"),
        retry_of=r.string("retry_of", "", max_len=64),
        trainer=trainer,
        workload=parse_workload(r.optional_obj("workload")),
        checkpoint_lineage=_lineage(r),
    )
    return request if key else replace(request, idempotency_key=content_key(request))


RUN_ID_SHAPE = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
"""A run id as it may name a folder: lowercase letters, digits and dashes (run_id_for gives run- and 20 hex digits),
so that no value reaches outside `runs/` (no `/`, no `..`)."""


def _lineage(r: Reader) -> str:
    lineage = r.string("checkpoint_lineage", "", max_len=64)
    if lineage and not RUN_ID_SHAPE.fullmatch(lineage):
        raise SchemaError(
            f"{lineage!r} is not a run id (lowercase letters, digits and dashes, e.g. run- and 20 hex digits as "
            "`landfall runs` shows them); leave it out to start from the run's own checkpoints",
            field="checkpoint_lineage",
        )
    if lineage and not r.data.get("retry_of"):
        raise SchemaError(
            "a run resumes another run's checkpoints only as its retry: set retry_of too (`landfall retry RUN_ID` "
            "does both), or leave checkpoint_lineage out",
            field="checkpoint_lineage",
        )
    return lineage


def _prefer(c: Reader) -> str:
    raw = c.data.get("prefer", "")
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        raise SchemaError(
            f'write a value of time as a string, e.g. "{raw:g}" (dollars per hour): the topic\'s schema types '
            "constraints.prefer as a string, so it also holds cheapest or fastest",
            field="constraints.prefer",
        )
    text = c.string("prefer", "", max_len=32).strip()
    try:
        parse_prefer(text)
    except ValueError as exc:
        raise SchemaError(str(exc), field="constraints.prefer") from exc
    return text


def content_key(request: TrainingRequest) -> str:
    """The idempotency key of a request published without one: a hash of its content with defaults applied."""
    data = replace(request, idempotency_key="").to_dict()
    if not data["retry_of"]:  # fields added later count only when set, so a content's key never changes
        del data["retry_of"]
    for later in ("objects", "objects_digest"):
        if not data["dataset"][later]:
            del data["dataset"][later]
    if not data["constraints"]["reservation"]:
        del data["constraints"]["reservation"]
    return "content:" + hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]
