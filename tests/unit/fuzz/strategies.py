"""Hypothesis strategies for what arrives at Landfall from outside: JSON of any shape, CloudEvents and Pub/Sub push
bodies (well formed or not), TrainingRequests built from the schema's own fields, hostile object names, manifests
and landfall.json contents, job log entries.

Hostile on purpose: lone surrogate escapes, integers past 64 bits, NaN and Infinity, deep nesting, huge strings,
control characters and names that look like markers in odd places.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from cloudevents.http import CloudEvent
from hypothesis import strategies as st

from functions import envelopes
from schemas.dataset_layout import MANIFEST, MARKER, OVERRIDES
from schemas.errors import SchemaError
from schemas.model_presets import load_presets
from schemas.uris import parse_gcs_uri
from schemas.vocabulary import FLEX_START_POLICIES, SPOT_POLICIES, TASKS

BUCKET = "landfall-landing"
"""The landing bucket of tests/fakes' settings (the only one Landfall reads from there)."""
ROUTE_PREFIXES = ("datasets/", "exports/")
"""Prefixes of deploy/routes.toml's routes."""

# Text that breaks naive code: surrogates (json.loads makes them from "\ud800"), controls, non-ASCII digits, RTL.
_NASTY_CHARS = st.sampled_from(
    [
        "\ud800",
        "\udfff",
        "\x00",
        "\x1f",
        "\x7f",
        "\u202e",
        "\ufeff",
        "²",
        "١",
        "é",
        "/",
        "\\",
        '"',
        "..",
        "//",
        "%2F",
        "*",
        "?",
        "\n",
        " ",
        "🚀",
    ]
)
text = st.one_of(
    st.text(max_size=30),
    st.lists(st.one_of(_NASTY_CHARS, st.text(max_size=3)), max_size=8).map("".join),
    st.integers(1_000, 70_000).map(lambda n: "x" * n),
)
"""Short text, hostile text, or one huge string."""

integers = st.one_of(
    st.integers(-10, 10), st.integers(), st.sampled_from([2**63 - 1, 2**63, -(2**63) - 1, 10**40, 10**4000])
)
"""Small, any, at and past the int64 bounds, and 4,001 digits long."""
numbers = st.one_of(integers, st.floats(allow_nan=True, allow_infinity=True))
scalars = st.one_of(st.none(), st.booleans(), numbers, text)


def mostly(meant: st.SearchStrategy[Any], other: st.SearchStrategy[Any], one_in: int = 5) -> st.SearchStrategy[Any]:
    """`meant` most of the time and `other` one time in `one_in`, so deep paths get most of the examples."""
    # Not the end values: hypothesis draws those far more often than 1 in `one_in`; shrinking goes to 0 (meant).
    return st.integers(0, one_in - 1).flatmap(lambda i: other if i == one_in // 2 else meant)


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any JSON value (including Python's NaN/Infinity extensions and lone surrogates)."""
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
        max_leaves=max_leaves,
    )


def deeply_nested() -> st.SearchStrategy[bytes]:
    """JSON text nested past the interpreter's recursion limit (or just under it)."""
    return st.tuples(st.sampled_from(["[", '{"a":']), st.integers(900, 120_000)).map(lambda t: (t[0] * t[1]).encode())


def dumps(value: Any) -> bytes:
    """JSON bytes as a careless publisher writes them (NaN and lone surrogates left in)."""
    return json.dumps(value, allow_nan=True).encode()


def json_bytes(objects: st.SearchStrategy[Any] | None = None) -> st.SearchStrategy[bytes]:
    """Bytes that are JSON of any shape, JSON of the given objects, almost-JSON, or not JSON at all."""
    return st.one_of(
        json_values().map(dumps),
        *([objects.map(dumps)] if objects is not None else []),
        st.binary(max_size=200),
        deeply_nested(),
        st.integers(4290, 5000).map(lambda n: b"9" * n),  # past what json reads as an int
        st.sampled_from(
            [
                b"",
                b"{",
                b"null",
                b"[]",
                b'"\\ud800"',
                b"NaN",
                b"\xff\xfe{}",
                b'{"a": 1, "a": 2}',
                '{"é": 1}'.encode("utf-16"),
            ]
        ),
    )


def base64_field(payload: st.SearchStrategy[bytes]) -> st.SearchStrategy[Any]:
    """A Pub/Sub `data` field: base64 of the payload, or garbage where base64 belongs."""
    return mostly(
        payload.map(lambda b: base64.b64encode(b).decode()),
        st.one_of(
            st.just(None), st.just(""), st.sampled_from(["not base64!", "YQ", "====", "é", "\ud800"]), json_values(4)
        ),
    )


def pubsub_message_objects(
    payload: st.SearchStrategy[bytes], attributes: st.SearchStrategy[Any] | None = None
) -> st.SearchStrategy[Any]:
    """The `message` of a Pub/Sub push: well formed with any payload, missing keys, or any JSON at all."""
    attrs = attributes if attributes is not None else st.one_of(st.dictionaries(text, text, max_size=4), json_values(4))
    given = {"attributes": attrs} if attributes is not None else {}
    fields = st.fixed_dictionaries(
        {"data": base64_field(payload), "messageId": mostly(st.text(max_size=20), json_values(2)), **given},
        optional={
            **({} if attributes is not None else {"attributes": attrs}),
            "publishTime": st.one_of(
                st.sampled_from(
                    [
                        "2026-11-22T12:00:00Z",
                        "2026-11-22T11:00:00Z",
                        "",
                        "yesterday",
                        "0001-01-01T00:00:00+23:59",
                        "9999-12-31T23:59:59-23:59",
                    ]
                ),
                json_values(2),
            ),
        },
    )
    return mostly(fields, json_values(6))


def pubsub_events(
    payload: st.SearchStrategy[bytes], attributes: st.SearchStrategy[Any] | None = None
) -> st.SearchStrategy[CloudEvent]:
    """messagePublished CloudEvents as functions-framework hands them over, with hostile data inside."""
    data = mostly(
        st.fixed_dictionaries(
            {"message": pubsub_message_objects(payload, attributes)}, optional={"subscription": text}
        ),
        json_values(6),
    )
    kind = mostly(
        st.just(envelopes.PUBSUB_PUBLISHED),
        st.one_of(st.just(envelopes.STORAGE_FINALIZED), st.text(min_size=1), text.map(lambda t: f"x{t}")),
    )
    return st.builds(_cloud_event, kind, data, st.text(min_size=1, max_size=20))


def storage_events(names: st.SearchStrategy[str]) -> st.SearchStrategy[CloudEvent]:
    """storage.object.v1 CloudEvents whose resource has hostile names, generations and sizes (or is any JSON)."""
    resource = st.fixed_dictionaries(
        {"bucket": mostly(st.just(BUCKET), json_values(2)), "name": mostly(names, json_values(2))},
        optional={
            "generation": mostly(st.integers(0, 2**70).map(str), st.one_of(integers, text, json_values(2))),
            "size": mostly(st.integers(0, 2**70).map(str), st.one_of(integers, text, json_values(2))),
        },
    )
    kinds = st.sampled_from(
        [
            envelopes.STORAGE_FINALIZED,
            "google.cloud.storage.object.v1.deleted",
            "google.cloud.storage.object.v1.somethingNew",
        ]
    )
    return st.builds(_cloud_event, kinds, mostly(resource, json_values(6)), st.text(min_size=1, max_size=20))


def notification_events(names: st.SearchStrategy[str]) -> st.SearchStrategy[CloudEvent]:
    """GCS Pub/Sub notifications (JSON_API_V1) with hostile attributes and payloads."""
    attributes = st.fixed_dictionaries(
        {
            "eventType": mostly(
                st.just("OBJECT_FINALIZE"), st.one_of(st.sampled_from(["OBJECT_DELETE", "OBJECT_X"]), text)
            ),
            "bucketId": mostly(st.just(BUCKET), text),
            "objectId": names,
        },
        optional={"objectGeneration": st.one_of(st.integers(0, 2**70).map(str), text)},
    )
    resource = st.fixed_dictionaries(
        {},
        optional={
            "name": names,
            "bucket": st.just(BUCKET),
            "size": st.one_of(st.integers(0, 2**70).map(str), integers, text),
            "generation": st.one_of(st.integers(0, 99).map(str), text),
        },
    )
    return pubsub_events(mostly(resource.map(dumps), json_bytes()), mostly(attributes, json_values(3)))


def _cloud_event(kind: str, data: Any, event_id: str) -> CloudEvent:
    return CloudEvent({"type": kind, "source": "//fuzz", "id": event_id}, data)


# --- object names ---------------------------------------------------------------------------------------------

_SEGMENTS = st.one_of(
    st.sampled_from(
        [
            MARKER,
            MANIFEST,
            OVERRIDES,
            "part-0.csv",
            "x.parquet",
            ".",
            "..",
            "",
            "_temporary",
            ".crc",
            "_SUCCESS.csv",
            "landfall.json.csv",
            "_MANIFEST.json ",
            " _SUCCESS",
            "datasets",
            "exports",
            "%2e%2e",
            "..%2F",
            "CON",
            "a\x00b",
            "\r",
            "\ud800",
            "x" * 300,
        ]
    ),
    st.text(max_size=12),
)


@st.composite
def object_names(draw: st.DrawFn) -> str:
    """Object names a bucket could hold (or a notification could claim): under a route or not, with markers and
    manifests at odd depths, '..', '//', control characters, surrogates, and names past Cloud Storage's limit."""
    start = draw(st.sampled_from(["", *ROUTE_PREFIXES, "/datasets/", "datasets//", "datasets/../", "runs/"]))
    segments = draw(st.lists(_SEGMENTS, max_size=6))
    name = start + "/".join(segments)
    return name * draw(st.sampled_from([1, 1, 1, 2, 40])) if name else name


# --- TrainingRequest ------------------------------------------------------------------------------------------

_PRESETS = tuple(load_presets())
# Each field: what the schema means it to hold (some valid, some meaningless), else any JSON at all.
_uris = st.one_of(
    st.sampled_from(
        [
            f"gs://{BUCKET}/datasets/d/",
            f"gs://{BUCKET}/datasets/d",
            "gs://",
            "gs:///x/",
            "",
            "gs://other-bucket/x/",
            "s3://b/x/",
            f"gs://{BUCKET}/../../etc/",
        ]
    ),
    st.text(max_size=40).map(lambda t: f"gs://{BUCKET}/{t}"),
    text,
)
_times = st.one_of(
    st.sampled_from(
        [
            "",
            "2026-11-22T13:00:00Z",
            "2026-11-22T11:00:00Z",
            "9999-12-31T23:59:59-23:59",
            "0001-01-01T00:00:00+23:59",
            "2026-13-40T00:00:00Z",
            "2026-11-22T13:00:00",
            "2026-11-22",
        ]
    ),
    text,
)
_words = st.one_of(
    st.sampled_from(
        [
            "us-central1",
            "europe-west4",
            "NVIDIA_TESLA_T4",
            "NVIDIA_H100_80GB",
            "nowhere",
            "",
            "a3-highgpu-8g",
            "n1-standard-4",
            "e2-standard-4",
        ]
    ),
    text,
)


def _either(meant: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return mostly(meant, json_values(3), one_in=6)


_counts = st.one_of(st.integers(-5, 20), integers)
REQUEST_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "schema_version": _either(st.sampled_from([1, 1, 0, 2, -1])),
    "idempotency_key": _either(st.one_of(text, st.just(""), st.just("   "))),
    "dataset": _either(
        st.fixed_dictionaries(
            {"uri": _either(_uris)},
            optional={
                "object_count": _either(_counts),
                "total_bytes": _either(st.one_of(st.integers(-1, 10**15), integers)),
                "formats": _either(st.lists(st.sampled_from(["csv", "parquet", "", "exe"]), max_size=3)),
            },
        )
    ),
    "task": _either(st.one_of(st.sampled_from(TASKS), text)),
    "model": _either(
        st.fixed_dictionaries(
            {"preset": _either(st.one_of(st.sampled_from(_PRESETS), text))}, optional={"label_column": _either(text)}
        )
    ),
    "hyperparameters": _either(
        st.fixed_dictionaries(
            {},
            optional={
                "epochs": _either(_counts),
                "batch_size": _either(_counts),
                "learning_rate": _either(numbers),
                "seed": _either(_counts),
                "max_steps": _either(_counts),
                "checkpoint_every_steps": _either(_counts),
                "extra": _either(st.dictionaries(text, text, max_size=3)),
            },
        )
    ),
    "constraints": _either(
        st.fixed_dictionaries(
            {},
            optional={
                "deadline": _either(_times),
                "budget_usd": _either(numbers),
                "regions": _either(st.lists(_words, max_size=3)),
                "gpu_allowlist": _either(st.lists(_words, max_size=3)),
                "max_gpus": _either(_counts),
                "spot": _either(st.one_of(st.sampled_from(SPOT_POLICIES), text)),
                "flex_start": _either(st.one_of(st.sampled_from(FLEX_START_POLICIES), text)),
                "machine_type": _either(_words),
                "accelerator_count": _either(_counts),
                "replica_count": _either(_counts),
            },
        )
    ),
    "source": _either(
        st.fixed_dictionaries(
            {},
            optional={
                "kind": _either(text),
                "object": _either(text),
                "generation": _either(text),
                "event_id": _either(text),
            },
        )
    ),
    "created_at": _either(_times),
    "labels": _either(st.dictionaries(text, text, max_size=3)),
}
REQUIRED_FIELDS = ("dataset", "task", "model")

training_requests = st.fixed_dictionaries(
    {k: REQUEST_FIELDS[k] for k in REQUIRED_FIELDS},
    optional={k: v for k, v in REQUEST_FIELDS.items() if k not in REQUIRED_FIELDS},
)
"""TrainingRequest objects field by field from the schema: mostly the right shape, often meaningless values."""

_uint = st.one_of(st.integers(0, 20), st.integers(0, 2**63 - 1))
_valid_times = st.sampled_from(
    [
        "",
        "2026-11-22T12:00:01Z",
        "2026-11-22T11:00:00Z",
        "2026-11-22T13:00:00+05:00",
        "2027-01-01T00:00:00Z",
        "9999-12-31T23:59:59+23:59",
        "0001-01-01T00:00:00-23:59",
        "2026-11-22T12:30:00.123456789Z",
    ]
)


def _gcs_folder_ok(uri: str) -> bool:
    try:
        parse_gcs_uri(uri, "dataset.uri", folder=True)
    except SchemaError:
        return False
    return True


schema_valid_requests = st.fixed_dictionaries(
    {
        "dataset": st.fixed_dictionaries(
            {
                "uri": st.one_of(
                    st.sampled_from(
                        [
                            f"gs://{BUCKET}/datasets/d/",
                            f"gs://{BUCKET}/",
                            f"gs://{BUCKET}/datasets/d",
                            "gs://other-bucket/x/",
                        ]
                    ),
                    # '..', '.' and empty segments, control characters and escapes of '.' or '/' are the schema's to
                    # refuse (schemas/uris.py): the general strategy sends those
                    st.text(max_size=40).map(lambda t: f"gs://{BUCKET}/{t}").filter(_gcs_folder_ok),
                )
            },
            optional={
                "object_count": _uint,
                "total_bytes": _uint,
                "formats": st.lists(st.text(max_size=8), max_size=3),
            },
        ),
        "task": st.sampled_from(TASKS),
        "model": st.fixed_dictionaries(
            {"preset": st.one_of(st.sampled_from(_PRESETS), st.text(max_size=128))},
            optional={"label_column": st.text(max_size=40)},
        ),
    },
    optional={
        "idempotency_key": st.text(min_size=1, max_size=60).filter(str.strip),
        "hyperparameters": st.fixed_dictionaries(
            {},
            optional={
                "epochs": st.integers(1, 2**63 - 1),
                "batch_size": st.integers(1, 2**63 - 1),
                "learning_rate": st.floats(min_value=1e-300, max_value=1e300),
                "seed": _uint,
                "max_steps": _uint,
                "checkpoint_every_steps": _uint,
                "extra": st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=3),
            },
        ),
        "constraints": st.fixed_dictionaries(
            {},
            optional={
                "deadline": _valid_times,
                "budget_usd": st.floats(min_value=0, max_value=1e300),
                "regions": st.lists(_words.filter(lambda w: _text_ok(w)), max_size=3),
                "gpu_allowlist": st.lists(_words.filter(lambda w: _text_ok(w)), max_size=3),
                "max_gpus": _uint,
                "spot": st.sampled_from(SPOT_POLICIES),
                "flex_start": st.sampled_from(FLEX_START_POLICIES),
                "machine_type": st.one_of(
                    st.sampled_from(["a3-highgpu-8g", "n1-standard-4", "g2-standard-8", "nope"]), st.text(max_size=64)
                ),
                "accelerator_count": _uint,
                "replica_count": _uint,
            },
        ),
        "created_at": _valid_times,
        "labels": st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=3),
    },
)
"""TrainingRequests that parse (every field the right type and within the schema's bounds) but may mean nothing:
unknown presets, past or absurd deadlines, other buckets, 2**63 - 1 epochs, regions and GPUs that do not exist."""


def _text_ok(value: str) -> bool:
    return len(value) <= 1024 and not any("\ud800" <= c <= "\udfff" for c in value)


# --- dataset files --------------------------------------------------------------------------------------------

_entry = st.fixed_dictionaries(
    {
        "name": mostly(
            st.sampled_from(["part-0.csv", "sub/part-2.csv"]),
            st.one_of(
                st.sampled_from(["missing.csv", "_SUCCESS", "landfall.json", "/part-0.csv", "m" * 1020 + ".csv"]),
                object_names(),
                json_values(3),
            ),
        ),
        "size": mostly(st.just(8), st.one_of(st.integers(-1, 20), integers, json_values(2))),
    },
    optional={
        "crc32c": _either(st.sampled_from(["", "yZRlqg==", "AAAAAA==", "y" * 5000])),
    },
)
"""A manifest entry: mostly one of the objects the test's dataset holds (8 bytes each), else anything."""
manifests = mostly(st.fixed_dictionaries({"objects": _either(st.lists(_entry, max_size=5))}).map(dumps), json_bytes())
"""_MANIFEST.json contents: manifests of plausible and hostile entries, any JSON, not JSON."""

_OVERRIDE_KEYS = (
    "task",
    "model",
    "hyperparameters",
    "constraints",
    "labels",
    "dataset",
    "idempotency_key",
    "source",
    "hyperparameters.epochs",
    "",
)
overrides = mostly(
    st.one_of(
        st.dictionaries(
            st.one_of(st.sampled_from(_OVERRIDE_KEYS), text),
            st.one_of(
                st.builds(
                    dict,
                    st.lists(
                        st.tuples(
                            st.sampled_from(
                                [
                                    "epochs",
                                    "batch_size",
                                    "learning_rate",
                                    "extra",
                                    "label_column",
                                    "preset",
                                    "budget_usd",
                                    "deadline",
                                    "spot",
                                    "regions",
                                    "team",
                                ]
                            ),
                            scalars,
                        ),
                        max_size=3,
                    ),
                ),
                json_values(4),
            ),
            max_size=4,
        ),
        st.dictionaries(st.sampled_from(_OVERRIDE_KEYS), json_values(4), max_size=3),
    ).map(dumps),
    json_bytes(),
)
"""landfall.json contents: override objects naming allowed, refused and unknown fields with any values."""


# --- job events -----------------------------------------------------------------------------------------------

_labels = st.fixed_dictionaries(
    {},
    optional={
        "job_id": _either(
            st.one_of(st.integers(0, 2**70).map(str), st.sampled_from(["", "12a", "²", "١٢٣", "-1"]), text)
        ),
        "project_id": _either(text),
        "task_name": _either(text),
    },
)
job_events = mostly(
    st.fixed_dictionaries(
        {
            "resource": _either(
                st.fixed_dictionaries(
                    {"type": _either(st.sampled_from(["ml_job", "gce_instance"])), "labels": _either(_labels)}
                )
            )
        },
        optional={
            "textPayload": _either(text),
            "jsonPayload": _either(st.dictionaries(text, json_values(3))),
            "severity": _either(text),
            "timestamp": _either(_times),
            "insertId": _either(text),
        },
    ).map(dumps),
    json_bytes(),
)
"""Cloud Logging LogEntry JSON: mostly ml_job entries with hostile fields, sometimes anything."""
