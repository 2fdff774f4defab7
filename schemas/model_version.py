"""A run's model in Vertex AI Model Registry (docs/models.md): which registry model and version holds it, and the
promotion decision taken when it was registered (champion and challenger, scored on the same held-out data).

Stored on the run record as `model` (absent until the run's model is registered) and published on RunFinished:

    {"model": "projects/p/locations/us-central1/models/landfall-default-tabular-iris", "version_id": "3",
     "registered_at": "2026-11-26T23:01:02Z",
     "promotion": {"decision": "promoted", "metric": "accuracy", "direction": "higher", "min_improvement": 0.01,
                   "challenger_score": 0.97, "champion_score": 0.93, "champion_version": "2",
                   "data": "held-out split of gs://b/datasets/iris/ (30 rows, objects 9f2c...)",
                   "reason": "accuracy 0.9700 beats the champion's 0.9300 by 0.0400 (at least 0.01)", "at": "...",
                   "by": "rule"}}

A version's metadata (Model.metadata: the run, its final metrics, lineage, the promotion) is written and read through
`stored_metadata`: the figure rules (schemas/run_metrics.py) and the bounds of a stored value
(schemas/record_bounds.py), so no NaN or Infinity is uploaded, and one stored before the rules reads without it.

Model ids and labels obey Vertex's rules (ModelService.UploadModel: a model id of at most 63 characters from
[a-z0-9_-], starting with a letter; labels: keys and values of at most 63 lower-case letters, digits, _ and -).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.record_bounds import bounded_value
from schemas.run_metrics import figure_problem

PRODUCTION_ALIAS = "production"
"""The alias that marks a route's champion (the version in use)."""

RUN_LABEL = "landfall-run"
"""Label naming the run whose model a version holds (the exactly-once search looks versions up by it)."""
DATASET_VERSION_LABEL = "landfall-dataset-version"
CONTENT_DIGEST_LABEL = "landfall-content"
ROUTE_LABEL = "landfall-route"

DECISIONS = {
    "first": "the route's first model: it becomes production",
    "promoted": "the challenger beat the champion by the rule's least improvement: production moved to it",
    "kept": "the challenger did not beat the champion by the rule: production stays",
    "not-comparable": "no score of the champion on the challenger's held-out data (or no score of the challenger "
    "for the rule's metric): production stays",
    "no-rule": "the route declares no promotion rule: production stays where it is",
    "superseded": "promoted, then a rival that scored the same champion improved on it by more and took production "
    "(the run record says so; the version keeps the decision it was uploaded with)",
    "manual-promote": "`landfall promote RUN_ID` moved production to this version",
    "manual-rollback": "`landfall rollback MODEL` moved production back to this version",
}
"""Every promotion decision, with what it means (one list, read by the CLI's help and docs/models.md)."""

DIRECTIONS = ("higher", "lower")
"""A promotion rule's direction: whether a higher or a lower score is better."""

_ID_MAX = 63
_LABEL_MAX = 63


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-_")


def label_value(text: str) -> str:
    """text as a Vertex label value: lower case, [a-z0-9_-], at most 63 characters (a longer one keeps its start and
    a 10-character hash of the whole, so two values that share a start stay apart)."""
    value = re.sub(r"[^a-z0-9_-]", "-", text.lower())
    if len(value) <= _LABEL_MAX:
        return value
    return f"{value[: _LABEL_MAX - 11]}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def model_id_for(route: str, dataset: str, code: str = "") -> str:
    """The registry model id of a route's dataset, and of the code that trains it where the route does not say which
    (code_name): `landfall-<route>-<dataset>[-<code>]`, stable and readable, shortened with a hash of all three when
    longer than Vertex's 63 characters."""
    base = "-".join(filter(None, ("landfall", _slug(route), _slug(dataset), _slug(code)))) or "landfall"
    if len(base) <= _ID_MAX:
        return base
    digest = hashlib.sha256(f"{route}\0{dataset}\0{code}".encode() if code else f"{route}\0{dataset}".encode())
    return f"{base[: _ID_MAX - 11].rstrip('-_')}-{digest.hexdigest()[:10]}"


def code_name(trainer: dict[str, Any]) -> str:
    """What names a team's code, whatever version of it runs: a script's file name (a folder's archive name), a
    package's module, an image's repository (no tag or digest); "" for the built-in trainer. Two versions of one
    script share it (a retrained model); two different scripts do not."""
    script = str(trainer.get("script") or "")
    if script:
        return script.rsplit("/", 1)[-1].removesuffix(".py").removesuffix(".pyz")
    module = str(trainer.get("python_module") or "")
    if module:
        return module
    image = str(trainer.get("image_uri") or "")
    return image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]


@dataclass(frozen=True)
class Promotion:
    """Whether the version became production, and the evidence."""

    decision: str
    """One of DECISIONS."""
    reason: str
    """One line for a person: the scores, the rule and what followed."""
    at: str
    """RFC 3339: when it was decided."""
    by: str = "rule"
    """"rule" (on registration), or who ran `landfall promote` / `landfall rollback`."""
    metric: str = ""
    direction: str = ""
    min_improvement: float = 0.0
    challenger_score: float | None = None
    champion_score: float | None = None
    champion_version: str = ""
    """The version that held production when the decision was taken ("" when none did)."""
    data: str = ""
    """The data both scores were measured on (the challenger's held-out split of its dataset version)."""
    scored_version: str = ""
    """The version champion_score is of, when not champion_version: production moved from it to champion_version
    while the challenger ran, and the challenger was compared with champion_version through their improvements over
    this version, which both scored ("" otherwise)."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.scored_version:
            del out["scored_version"]
        return out


@dataclass(frozen=True)
class ModelVersionRef:
    """The registry version holding a run's model."""

    model: str
    """projects/P/locations/R/models/ID."""
    version_id: str
    registered_at: str
    promotion: Promotion | None = None

    @property
    def version_name(self) -> str:
        """MODEL@VERSION, the name Vertex accepts wherever a model version is meant."""
        return f"{self.model}@{self.version_id}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version_id": self.version_id,
            "registered_at": self.registered_at,
            "promotion": None if self.promotion is None else self.promotion.to_dict(),
        }


def stored_metadata(metadata: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A version's metadata as Landfall writes and reads it: every figure one its rule keeps, within the bounds of
    a stored value; and a note of each thing left out."""
    return bounded_value(metadata, "metadata", check=_metadata_figure)


def _metadata_figure(name: str, value: object) -> str | None:
    """figure_problem, a whole float read as the integer it is (a protobuf Value holds every number as a double)."""
    whole = isinstance(value, float) and value.is_integer()
    return figure_problem(name, int(value) if whole and isinstance(value, float) else value)


def _optional_number(r: Reader, key: str) -> float | None:
    return None if r.data.get(key) is None else r.number(key)


def parse_promotion(r: Reader) -> Promotion:
    return Promotion(
        decision=r.string("decision", choices=tuple(DECISIONS)),
        reason=r.string("reason", "", max_len=2000),
        at=r.string("at", max_len=64),
        by=r.string("by", "rule", max_len=200),
        metric=r.string("metric", "", max_len=100),
        direction=r.string("direction", ""),
        min_improvement=r.number("min_improvement", 0.0),
        challenger_score=_optional_number(r, "challenger_score"),
        champion_score=_optional_number(r, "champion_score"),
        champion_version=r.string("champion_version", "", max_len=64),
        data=r.string("data", "", max_len=2000),
        scored_version=r.string("scored_version", "", max_len=64),
    )


def parse_model_version(r: Reader) -> ModelVersionRef:
    """Read a run's `model` (or RunFinished's); raises SchemaError naming the field that does not fit."""
    promotion = r.optional_obj("promotion")
    return ModelVersionRef(
        model=r.string("model", max_len=400),
        version_id=r.string("version_id", max_len=64),
        registered_at=r.string("registered_at", max_len=64),
        promotion=None if promotion is None else parse_promotion(promotion),
    )


__all__ = [
    "CONTENT_DIGEST_LABEL",
    "DATASET_VERSION_LABEL",
    "DECISIONS",
    "DIRECTIONS",
    "PRODUCTION_ALIAS",
    "ROUTE_LABEL",
    "RUN_LABEL",
    "ModelVersionRef",
    "Promotion",
    "PromotionRule",
    "VersionView",
    "label_value",
    "model_id_for",
    "parse_model_version",
    "parse_promotion",
    "parse_promotion_rule",
    "stored_metadata",
]


@dataclass(frozen=True)
class VersionView:
    """One registry model version as Landfall reads it (ModelService's Model message, the fields it uses)."""

    model: str
    """projects/P/locations/R/models/ID."""
    version_id: str
    display_name: str = ""
    aliases: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    artifact_uri: str = ""
    version_description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Model.metadata as JSON: Landfall writes the run, its final metrics, lineage and the promotion decision."""
    created_at: str = ""

    @property
    def version_name(self) -> str:
        return f"{self.model}@{self.version_id}"

    @property
    def model_id(self) -> str:
        return self.model.rsplit("/", 1)[-1]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "aliases": list(self.aliases)}


@dataclass(frozen=True)
class PromotionRule:
    """A route's promotion rule ([routes.promotion] in deploy/routes.toml): when a challenger replaces the champion."""

    metric: str
    """A figure in metrics.json's `final` (e.g. accuracy, loss, r2, rmse, perplexity, or a team code's own)."""
    direction: str
    """One of DIRECTIONS: "higher" or "lower" is better."""
    min_improvement: float = 0.0
    """The least margin by which the challenger must beat the champion (in the metric's units)."""

    def better_by(self, challenger: float, champion: float) -> float:
        """How much better the challenger is (negative: worse)."""
        return challenger - champion if self.direction == "higher" else champion - challenger


def parse_promotion_rule(data: object, where: str) -> PromotionRule:
    """Read a [routes.promotion] table; SchemaError naming the field and what was expected."""
    r = Reader(data, where)
    unknown = sorted(set(r.data) - {"metric", "direction", "min_improvement"})
    if unknown:
        raise SchemaError(
            f"unknown key(s) {unknown}: a promotion rule holds metric, direction and min_improvement", field=where
        )
    metric = r.string("metric", max_len=100)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", metric):
        raise SchemaError(f"{metric!r} is not a metric name (e.g. accuracy, loss, r2)", field=f"{where}.metric")
    return PromotionRule(
        metric=metric,
        direction=r.string("direction", choices=DIRECTIONS),
        min_improvement=r.number("min_improvement", 0.0, minimum=0.0),
    )
