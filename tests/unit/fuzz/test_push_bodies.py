"""Pub/Sub push bodies over HTTP, through functions-framework as deployed (its Flask test client: no socket), to the
Pub/Sub-fed functions. A push answered 2xx is acknowledged; anything else is redelivered. So every body Pub/Sub
could send (a `message` object with any data, attributes and ids) is answered 200, or 500 only for a TransientError
Landfall raised. Bodies Pub/Sub never sends (not JSON, not an object) are refused by functions-framework before
Landfall's code runs (so are pushes without `data` or `messageId`: functions-framework answers 400, which
Pub/Sub would redeliver; Pub/Sub always sends both); the property only requires that Landfall's code, when
reached, decides.
"""

from __future__ import annotations

import json
import logging
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from tests.unit.fuzz import strategies as s
from tests.unit.fuzz.harness import Fakes, wired

MAIN = Path(__file__).resolve().parents[3] / "functions" / "main.py"
PUBSUB_FED = ("dispatch", "on_job_event", "on_object_finalized")


@cache
def _client(target: str) -> Any:
    import functions_framework

    return functions_framework.create_app(target=target, source=str(MAIN), signature_type="cloudevent").test_client()


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "landfall":
            self.messages.append(record.getMessage())


push_bodies = s.mostly(
    st.fixed_dictionaries(
        {
            "message": s.pubsub_message_objects(s.mostly(s.training_requests.map(s.dumps), s.json_bytes())),
            "subscription": st.just("projects/landfall-local/subscriptions/fuzz"),
        }
    ).map(s.dumps),
    s.json_bytes(),
)
"""What a push subscription POSTs ({"message": ..., "subscription": ...}), with hostile messages; or any bytes."""


@given(st.sampled_from(PUBSUB_FED), push_bodies)
def test_a_push_is_acknowledged_unless_landfall_asked_for_a_retry(target: str, body: bytes) -> None:
    said = _Said()
    logger = logging.getLogger("landfall")
    logger.addHandler(said)
    try:
        with wired(Fakes()):
            response = _client(target).post("/", data=body, headers={"Content-Type": "application/json"})
    finally:
        logger.removeHandler(said)
    reached = bool(said.messages)
    event(f"{target}: HTTP {response.status_code}{'' if reached else ' (before Landfall)'}")
    if not reached:
        assert _from_pubsub(body) is False, f"a push Pub/Sub could send never reached Landfall: {body[:200]!r}"
        return
    unexpected = [m for m in said.messages if "unexpected error" in m]
    assert not unexpected, unexpected
    if response.status_code != 200:
        assert any("will be retried" in m for m in said.messages), (response.status_code, said.messages)


def _from_pubsub(body: bytes) -> bool:
    """Whether Pub/Sub could have sent this body: a JSON object whose `message` is an object with string `data` and
    `messageId` (functions-framework refuses a push without both, answering 400)."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return False
    message = parsed.get("message") if isinstance(parsed, dict) else None
    return isinstance(message, dict) and all(isinstance(message.get(k), str) for k in ("data", "messageId"))
