"""Prediction requests for the built-in trainer's models (trainer/prediction.py), without a server: Vertex AI's
{"instances", "parameters"} -> {"predictions"} body, each task's instances, and 400s that say what was expected."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from tests.model_folders import CLASSES, FEATURES, gpt_config, loaded, tabular_config
from trainer.prediction import MAX_NEW_BYTES, MAX_REQUEST_BYTES, BadRequest, predict_body
from trainer.serve import ServeSettings

ROWS = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]]


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def test_tabular_rows_and_named_rows_predict_the_labels_load_model_gives() -> None:
    model = loaded(tabular_config())
    expected = model.predict(ROWS)
    named = [dict(zip(FEATURES, row, strict=True)) for row in ROWS]
    assert predict_body(model, body({"instances": ROWS})) == {"predictions": expected}
    assert predict_body(model, body({"instances": named, "parameters": {}})) == {"predictions": expected}
    assert set(expected) <= set(CLASSES)


def test_regression_predicts_values_in_the_labels_units() -> None:
    model = loaded(tabular_config("tabular-regression"))
    out = predict_body(model, body({"instances": ROWS}))["predictions"]
    expected = model.predict(ROWS)
    assert isinstance(expected, torch.Tensor) and out == pytest.approx(expected.tolist())
    assert all(isinstance(v, float) for v in out)


def test_causal_lm_continues_each_prompt_up_to_max_new_bytes() -> None:
    model = loaded(gpt_config())
    out = predict_body(model, body({"instances": ["Once", {"prompt": "Up"}], "parameters": {"max_new_bytes": 5}}))
    assert out["predictions"] == [model.generate("Once", max_new_bytes=5), model.generate("Up", max_new_bytes=5)]
    assert out["predictions"][0].startswith("Once")


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"not json", "expected a JSON object"),
        (body([1, 2]), "got list"),
        (body({"rows": ROWS}), "unknown field(s) rows"),
        (body({"instances": []}), "non-empty list"),
        (body({"instances": ROWS, "parameters": [1]}), '"parameters": an object'),
        (body({"instances": ROWS, "parameters": {"k": 1}}), "takes no parameters"),
        (body({"instances": [[1.0, 2.0]]}), "instances[0]: 2 values: expected 4 numbers in the order"),
        (body({"instances": [ROWS[0], "x"]}), "instances[1]: got str"),
        (body({"instances": [[1, 2, "3", 4]]}), "petal_length is '3': expected a finite number"),
        (body({"instances": [[1, 2, True, 4]]}), "expected a finite number"),
        (body({"instances": [{"sepal_length": 1}]}), "missing ['sepal_width'"),
        (body({"instances": [dict(zip([*FEATURES, "x"], [1] * 5, strict=True))]}), "unknown ['x']"),
        (b" " * (MAX_REQUEST_BYTES + 1), "at most 1500000"),
    ],
)
def test_a_tabular_request_that_does_not_fit_says_what_was_expected(raw: bytes, said: str) -> None:
    with pytest.raises(BadRequest) as err:
        predict_body(loaded(tabular_config()), raw)
    assert said in str(err.value)


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        ({"instances": [3]}, 'instances[0]: expected a prompt: a string, or {"prompt": "..."}'),
        ({"instances": ["a"], "parameters": {"max_new_bytes": MAX_NEW_BYTES + 1}}, "integer from 1 to 1024"),
        ({"instances": ["a"], "parameters": {"max_new_bytes": 2.5}}, "max_new_bytes is 2.5"),
        ({"instances": ["a"], "parameters": {"temperature": -1}}, "expected a number >= 0"),
        ({"instances": ["a"], "parameters": {"top_k": 3}}, "unknown parameter(s) top_k"),
        ({"instances": ["a"] * 33}, "at most 32"),
    ],
)
def test_a_causal_lm_request_that_does_not_fit_says_what_was_expected(doc: dict[str, Any], said: str) -> None:
    with pytest.raises(BadRequest) as err:
        predict_body(loaded(gpt_config()), body(doc))
    assert said in str(err.value)


def test_settings_come_from_vertexs_variables_and_need_the_model_folder() -> None:
    settings = ServeSettings.from_env(
        {"AIP_STORAGE_URI": "gs://b/m", "AIP_HTTP_PORT": "9000", "AIP_PREDICT_ROUTE": "/v1/endpoints/1:predict"}
    )
    routes = (settings.health_route, settings.predict_route)
    assert settings.port == 9000 and routes == ("/health", "/v1/endpoints/1:predict")
    with pytest.raises(ValueError, match="AIP_STORAGE_URI is not set"):
        ServeSettings.from_env({})
    with pytest.raises(ValueError, match="AIP_HTTP_PORT is 'x'"):
        ServeSettings.from_env({"AIP_STORAGE_URI": "/m", "AIP_HTTP_PORT": "x"})
