"""`landfall models [NAME]`, `landfall model VERSION`, `landfall promote RUN_ID`, `landfall rollback MODEL`: the
routes' models in Vertex AI Model Registry, their versions, aliases, scores and lineage, and moving `production` by
hand (docs/models.md). A hand-made move is recorded on the run whose version gets the alias, as the rule's are."""

from __future__ import annotations

import argparse
import getpass
import json
from datetime import UTC, datetime
from typing import Any

from landfall.commands.runs import run_id_argument
from landfall.errors import CommandError, client_boundary
from landfall.queries.models import held_decisions, model_versions
from landfall.queries.models import model_id as _model_id
from landfall.queries.runs import read_run
from landfall.tables import render_table
from landfall.words import decision_text, score_text


def _registry() -> Any:
    from landfall.queries.models import registry

    return registry()


def _decisions(versions: list[Any]) -> dict[str, str]:
    """The decision that holds now for each version, as its run records it (held_decisions)."""
    return held_decisions(versions)


def _row(v: Any, decisions: dict[str, str]) -> list[object]:
    return [
        v.model_id,
        v.version_id,
        ",".join(v.aliases),
        decision_text(v.metadata, v.labels, decisions.get(v.version_name, "")),
        score_text(v.metadata),
        v.labels.get("landfall-run", ""),
    ]


def cmd_models(args: argparse.Namespace) -> int:
    versions = model_versions(args.name, _registry())
    if args.json:
        print(json.dumps([v.to_dict() for v in versions], indent=2))
        return 0
    if not versions:
        print("no models yet: a SUCCEEDED run's model is registered when the run ends")
        return 0
    decisions = _decisions(versions)
    print(
        render_table(
            ["MODEL", "VERSION", "ALIASES", "DECISION", "SCORE", "RUN"], [_row(v, decisions) for v in versions]
        )
    )
    return 0


def whole_numbers(value: Any) -> Any:
    """The lineage as Landfall wrote it: a version's metadata is a protobuf Value, whose numbers are all doubles, so
    counts and sizes come back as 4.0 and 64.0; whole ones are shown as the integers they were."""
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def cmd_model(args: argparse.Namespace) -> int:
    registry = _registry()
    name = args.version if args.version.startswith("projects/") else registry.model_name(args.version)
    if "@" not in name:
        raise CommandError(f"{args.version!r} names no version: write MODEL@VERSION_ID or MODEL@ALIAS")
    with client_boundary(f"read {name}"):
        version = registry.get(name)
    if version is None:
        raise CommandError(f"no model version {args.version!r}; `landfall models NAME` lists the versions")
    if args.json:
        print(json.dumps(version.to_dict(), indent=2))
        return 0
    metadata = version.metadata
    promotion = metadata.get("promotion") or {}
    lineage = whole_numbers(metadata.get("lineage") or {})
    dataset = lineage.get("dataset") or {}
    read = dataset.get("read") or {}
    print(f"{version.version_name}  aliases: {', '.join(version.aliases) or '-'}")
    print(f"  run:       {version.labels.get('landfall-run', '')} (`landfall run` shows it)")
    print(f"  artifacts: {version.artifact_uri}")
    print(f"  dataset:   {dataset.get('uri', '')} version {dataset.get('version_key', '')}")
    print(f"             {read.get('object_count', '?')} objects, digest {dataset.get('objects_digest', '')}")
    for obj in (read.get("objects") or [])[:5]:
        print(f"             {obj.get('name')} generation {obj.get('generation')}")
    print(f"  request:   {json.dumps(lineage.get('request') or {}, sort_keys=True)[:300]}")
    print(f"  plan:      {json.dumps(lineage.get('plan') or {}, sort_keys=True)}")
    print(f"  code:      {json.dumps(lineage.get('code') or {}, sort_keys=True)[:300]}")
    print(f"  scores:    {score_text(metadata) or '-'}")
    print(f"  decision:  {promotion.get('decision', '-')}: {promotion.get('reason', '')}")
    if promotion.get("data"):
        print(f"  measured:  {promotion['data']}")
    return 0


def _runs() -> Any:
    from functions.wiring import runs_store

    return runs_store()


def _record(run_id: str, promotion: Any) -> None:
    """The hand-made move on the run whose version now holds production."""
    from dataclasses import replace

    def step(cur: Any) -> tuple[Any, None]:
        if cur is None or cur.model is None:
            return None, None
        return replace(cur, model=replace(cur.model, promotion=promotion)), None

    with client_boundary(f"record the move on run {run_id}"):
        _runs().apply(run_id, step)


def _move(version: Any, decision: str, why: str, previous: Any) -> None:
    from schemas.model_version import PRODUCTION_ALIAS, Promotion
    from schemas.times import format_timestamp

    registry = _registry()
    with client_boundary(f"move {PRODUCTION_ALIAS} to {version.version_name}"):
        registry.set_alias(version.version_name, PRODUCTION_ALIAS)
    promotion = Promotion(
        decision=decision,
        reason=why,
        at=format_timestamp(datetime.now(UTC)),
        by=getpass.getuser(),
        champion_version="" if previous is None else previous.version_id,
    )
    run_id = version.labels.get("landfall-run", "")
    if run_id:
        _record(run_id, promotion)
    print(f"{PRODUCTION_ALIAS} -> {version.version_name} ({decision}; was version {promotion.champion_version or '-'})")


def cmd_promote(args: argparse.Namespace) -> int:
    from schemas.model_version import PRODUCTION_ALIAS

    run = read_run(args.run_id, "promote")
    if run.model is None:
        raise CommandError(f"run {run.run_id} ({run.state}) has no registered model: only SUCCEEDED runs have one")
    registry = _registry()
    with client_boundary(f"read {run.model.version_name}"):
        version = registry.get(run.model.version_name)
        previous = registry.get(f"{run.model.model}@{PRODUCTION_ALIAS}")
    if version is None:
        raise CommandError(f"{run.model.version_name} is no longer in Model Registry")
    if PRODUCTION_ALIAS in version.aliases:
        print(f"{version.version_name} is production already")
        return 0
    _move(version, "manual-promote", f"promoted by hand from run {run.run_id}", previous)
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    from schemas.model_version import PRODUCTION_ALIAS

    registry = _registry()
    model_id = _model_id(args.model)
    with client_boundary(f"list the versions of {model_id}"):
        versions = registry.versions(model_id)
    current = next((v for v in versions if PRODUCTION_ALIAS in v.aliases), None)
    if current is None:
        raise CommandError(f"no version of {model_id!r} holds {PRODUCTION_ALIAS}; `landfall models` lists them")
    decisions = _decisions(versions)
    earlier = [
        v
        for v in versions
        if int(v.version_id) < int(current.version_id)
        and decision_text(v.metadata, v.labels, decisions.get(v.version_name, ""))
        in ("first", "promoted", "manual-promote", "manual-rollback")
    ]
    if not earlier:
        raise CommandError(
            f"{current.version_name} is the first production version of {model_id}: nothing to roll back to"
        )
    target = max(earlier, key=lambda v: int(v.version_id))
    _move(target, "manual-rollback", f"rolled back by hand from version {current.version_id}", current)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("models", help="list the routes' models in Vertex AI Model Registry, with aliases and scores")
    p.add_argument("name", nargs="?", default="", help="one model's id (e.g. landfall-default-tabular-iris)")
    p.add_argument("--json", action="store_true", help="every version as JSON")
    p.set_defaults(func=cmd_models)
    p = sub.add_parser("model", help="one model version with its lineage and promotion decision")
    p.add_argument("version", help="MODEL@VERSION_ID or MODEL@ALIAS (e.g. landfall-default-tabular-iris@production)")
    p.add_argument("--json", action="store_true", help="the version as JSON")
    p.set_defaults(func=cmd_model)
    p = sub.add_parser("promote", help="move a route's production alias to a run's model version by hand")
    p.add_argument("run_id", type=run_id_argument, metavar="RUN_ID")
    p.set_defaults(func=cmd_promote)
    p = sub.add_parser("rollback", help="move production back to the version that held it before")
    p.add_argument("model", metavar="MODEL", help="the model's id")
    p.set_defaults(func=cmd_rollback)
