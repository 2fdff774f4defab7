"""One prediction request for a built-in trainer model, without a server (trainer/serve.py serves it over HTTP).

Vertex AI's custom container contract ("Custom container requirements for prediction"): the body is JSON
`{"instances": [...], "parameters": {...}}` and the answer `{"predictions": [...]}`, one prediction per instance, in
order. What an instance is depends on the model's task (config.json):

    tabular-classification / -regression   [5.1, 3.5, 1.4, 0.2]   or   {"sepal_length": 5.1, ...}
        -> the data's own label ("setosa", 2) or the value in the label's units (LoadedModel.predict)
    causal-lm                               "Once upon"            or   {"prompt": "Once upon"}
        -> the prompt and its continuation (LoadedModel.generate); parameters: max_new_bytes (1..1024, default 64),
           temperature (>= 0, default 0: greedy), seed (default 0)

A request that does not fit raises BadRequest with what was expected; the server answers it with 400.
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch

from trainer.model_io import LoadedModel

MAX_REQUEST_BYTES = 1_500_000
"""Vertex AI refuses an online prediction request over 1.5 MB before it reaches the container; the server refuses
the same (413) when called directly."""
MAX_NEW_BYTES = 1024
"""The most bytes one causal-lm prediction may generate (parameters.max_new_bytes)."""
DEFAULT_NEW_BYTES = 64
MAX_PROMPTS = 32
"""The most causal-lm instances in one request: each costs max_new_bytes forward passes."""
GENERATION_PARAMETERS = ("max_new_bytes", "temperature", "seed")


class BadRequest(ValueError):
    """A request that does not fit the model; its message says what was expected."""


def predict_body(model: LoadedModel, body: bytes) -> dict[str, Any]:
    """The response for a request body: {"predictions": [...]}, or BadRequest."""
    instances, parameters = parse_request(body)
    if model.task == "causal-lm":
        return {"predictions": generate(model, instances, parameters)}
    return {"predictions": predict_rows(model, instances, parameters)}


def parse_request(body: bytes) -> tuple[list[Any], dict[str, Any]]:
    """The instances (a non-empty list) and parameters (an object, {} when absent) of a request body."""
    if len(body) > MAX_REQUEST_BYTES:
        raise BadRequest(f"the request is {len(body)} bytes; at most {MAX_REQUEST_BYTES} (Vertex AI's 1.5 MB limit)")
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f'expected a JSON object {{"instances": [...], "parameters": {{...}}}}: {exc}') from None
    if not isinstance(doc, dict):
        raise BadRequest(f'expected a JSON object {{"instances": [...]}}, got {type(doc).__name__}')
    unknown = sorted(set(doc) - {"instances", "parameters"})
    if unknown:
        raise BadRequest(f"unknown field(s) {', '.join(unknown)}: a request has `instances` and `parameters`")
    instances = doc.get("instances")
    if not isinstance(instances, list) or not instances:
        raise BadRequest('expected "instances": a non-empty list, one entry per prediction')
    parameters = doc.get("parameters")
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise BadRequest(f'expected "parameters": an object, got {type(parameters).__name__}')
    return instances, parameters


def predict_rows(model: LoadedModel, instances: list[Any], parameters: dict[str, Any]) -> list[Any]:
    """Tabular: feature rows -> labels or values, as LoadedModel.predict gives them (JSON numbers or strings)."""
    if parameters:
        raise BadRequest(f"a {model.task} model takes no parameters; got {', '.join(sorted(parameters))}")
    names = [str(n) for n in model.config["data"]["feature_names"]]
    rows = [_row(instance, names, i) for i, instance in enumerate(instances)]
    out = model.predict(rows)
    values: list[Any] = out.tolist() if isinstance(out, torch.Tensor) else list(out)
    return values


def _row(instance: Any, names: list[str], index: int) -> list[float]:
    where = f"instances[{index}]"
    expected = f"{len(names)} numbers in the order {names}, or an object with those keys"
    if isinstance(instance, dict):
        missing = [n for n in names if n not in instance]
        extra = sorted(set(instance) - set(names))
        if missing or extra:
            said = "; ".join(
                part for part in (f"missing {missing}" if missing else "", f"unknown {extra}" if extra else "") if part
            )
            raise BadRequest(f"{where}: {said}: expected {expected}")
        values = [instance[n] for n in names]
    elif isinstance(instance, list):
        if len(instance) != len(names):
            raise BadRequest(f"{where}: {len(instance)} values: expected {expected}")
        values = instance
    else:
        raise BadRequest(f"{where}: got {type(instance).__name__}: expected {expected}")
    for name, value in zip(names, values, strict=True):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise BadRequest(f"{where}: {name} is {value!r}: expected a finite number")
    return [float(v) for v in values]


def generate(model: LoadedModel, instances: list[Any], parameters: dict[str, Any]) -> list[str]:
    """Causal-lm: prompts -> each prompt with its continuation."""
    unknown = sorted(set(parameters) - set(GENERATION_PARAMETERS))
    if unknown:
        raise BadRequest(f"unknown parameter(s) {', '.join(unknown)}: a causal-lm model takes {GENERATION_PARAMETERS}")
    if len(instances) > MAX_PROMPTS:
        raise BadRequest(f"{len(instances)} prompts: at most {MAX_PROMPTS} in one request")
    max_new_bytes = _integer(parameters, "max_new_bytes", DEFAULT_NEW_BYTES, 1, MAX_NEW_BYTES)
    seed = _integer(parameters, "seed", 0, 0, 2**63 - 1)
    temperature = parameters.get("temperature", 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature >= 0:
        raise BadRequest(f"parameters.temperature is {temperature!r}: expected a number >= 0 (0 = greedy)")
    prompts = [_prompt(instance, i) for i, instance in enumerate(instances)]
    return [model.generate(p, max_new_bytes=max_new_bytes, temperature=float(temperature), seed=seed) for p in prompts]


def _integer(parameters: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = parameters.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"parameters.{name} is {value!r}: expected an integer from {low} to {high}")
    return value


def _prompt(instance: Any, index: int) -> str:
    if isinstance(instance, dict) and set(instance) == {"prompt"}:
        instance = instance["prompt"]
    if not isinstance(instance, str):
        raise BadRequest(f'instances[{index}]: expected a prompt: a string, or {{"prompt": "..."}}')
    return instance
