"""bench/server_cpu.py's parts that need no server: its entry points take the push body the delivery bridge sends
(functions-framework turns it into a CloudEvent), `decode` really parses the TrainingRequest, and the local stack's
function service runs the source it is given."""

from __future__ import annotations

import base64
import json

import functions_framework
import pytest

from bench.server_cpu import TARGETS, TARGETS_SOURCE, push_bodies
from deploy.local import services
from schemas.training_request import parse_training_request

SUBSCRIPTION = "projects/landfall-local/subscriptions/landfall-dispatch"


@pytest.mark.parametrize("target", TARGETS)
def test_each_entry_point_acknowledges_the_push_body_the_bridge_sends(target: str) -> None:
    body = push_bodies(1, SUBSCRIPTION)[0]
    request = parse_training_request(base64.b64decode(body["message"]["data"]))
    assert request.dataset.objects, "the bench's message carries its object list, as ingest publishes it"
    app = functions_framework.create_app(target, str(TARGETS_SOURCE), "cloudevent")
    response = app.test_client().post("/", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200


def test_decode_parses_the_request_so_a_broken_one_is_not_acknowledged() -> None:
    body = push_bodies(1, SUBSCRIPTION)[0]
    body["message"]["data"] = base64.b64encode(b'{"schema_version": 1}').decode()
    client = functions_framework.create_app("decode", str(TARGETS_SOURCE), "cloudevent").test_client()
    assert client.post("/", data=json.dumps(body), content_type="application/json").status_code == 500
    noop = functions_framework.create_app("noop", str(TARGETS_SOURCE), "cloudevent").test_client()
    assert noop.post("/", data=json.dumps(body), content_type="application/json").status_code == 200


def test_a_function_service_runs_functions_main_unless_given_another_source() -> None:
    deployed = services.function("dispatch", 8081, {})
    assert deployed.argv[deployed.argv.index("--source") + 1] == str(services.FUNCTIONS_SOURCE)
    assert services.FUNCTIONS_SOURCE.name == "main.py" and services.FUNCTIONS_SOURCE.parent.name == "functions"
    bench = services.function("noop", 8081, {}, source=TARGETS_SOURCE)
    assert bench.argv[bench.argv.index("--source") + 1] == str(TARGETS_SOURCE)
    assert bench.argv[bench.argv.index("--target") + 1] == "noop"
