"""The route's production model (the champion) scored on this run's held-out split, so that Landfall compares the
new model (the challenger) with it on the same data (docs/models.md, docs/trainer-contract.md).

The dispatcher names the champion in the job's environment when the route has a promotion rule:

    LANDFALL_CHAMPION_MODEL_DIR      the champion's model folder (its model.pt and config.json, trainer/model_io.py)
    LANDFALL_CHAMPION_MODEL_VERSION  its registry version, MODEL@VERSION_ID, written back beside the score

metrics.json then holds `champion`: {"version", "model_dir", "final": {the task's figures}, "samples"}, or
{"version", "model_dir", "skipped": why} when the champion cannot be scored on this data (another task, other
feature columns or classes, nothing held out, its folder unreadable): the decision then says not comparable.
Collective: every rank scores its share of the held-out records, as for the run's own figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from trainer.logs import log
from trainer.loop import Session, evaluate, figures
from trainer.model_io import load_model
from trainer.user_code import CHAMPION_DIR_ENV

CHAMPION_VERSION_ENV = "LANDFALL_CHAMPION_MODEL_VERSION"


class _Restandardised(nn.Module):
    """A regression champion's output in this run's standardised target units (each model predicts its own
    training split's standardised target)."""

    def __init__(self, module: nn.Module, theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> None:
        super().__init__()
        self.module = module
        self.scale = float(theirs.get("label_std", 1.0)) / float(ours.get("label_std", 1.0) or 1.0)
        self.shift = (float(theirs.get("label_mean", 0.0)) - float(ours.get("label_mean", 0.0))) / float(
            ours.get("label_std", 1.0) or 1.0
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.module(x)
        return out * self.scale + self.shift


def _mismatch(config: Mapping[str, Any], s: Session) -> str:
    """Why the champion cannot be scored on this run's records ("" when it can)."""
    if config.get("task") != s.config.task:
        return f"the champion is a {config.get('task')} model, this run trains {s.config.task}"
    if s.config.task == "causal-lm":
        return ""
    theirs, ours = config.get("data") or {}, s.data_spec
    if list(theirs.get("feature_names") or []) != list(ours.get("feature_names") or []):
        return "the champion reads other feature columns than this dataset version holds"
    if list(theirs.get("classes") or []) != list(ours.get("classes") or []):
        return "the champion predicts other classes than this dataset version's labels"
    return ""


def score_champion(s: Session, environ: Mapping[str, str]) -> dict[str, Any] | None:
    """metrics.json's `champion` section; None when the job names no champion."""
    model_dir = environ.get(CHAMPION_DIR_ENV, "")
    if not model_dir:
        return None
    section: dict[str, Any] = {"version": environ.get(CHAMPION_VERSION_ENV, ""), "model_dir": model_dir}
    if s.evaluation.split != "held-out":
        return {**section, "skipped": "nothing is held out of this dataset version to score the champion on"}
    try:
        loaded = load_model(model_dir)
    except (OSError, KeyError, ValueError, RuntimeError) as exc:
        return {**section, "skipped": f"the champion's model in {model_dir} cannot be loaded: {exc}"}
    why = _mismatch(loaded.config, s)
    if why:
        return {**section, "skipped": why}
    module: nn.Module = loaded.module
    if s.config.task == "tabular-regression":
        module = _Restandardised(module, loaded.config.get("data") or {}, s.data_spec)
    totals = evaluate(s, module.to(s.device)).cpu()
    final = figures(s, totals, 0).to_dict()
    final.pop("epoch", None)
    log("champion scored", version=section["version"], final=final, samples=int(totals[2]))
    return {**section, "final": final, "samples": int(totals[2])}


__all__ = ["CHAMPION_DIR_ENV", "CHAMPION_VERSION_ENV", "score_champion"]
