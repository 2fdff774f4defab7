"""A Cloud Function for the delivery tests, served by functions-framework like Landfall's own.

It decodes each push with the functions' own decoder (functions.envelopes), appends what it received to the JSON
lines file $FLAKY_LOG, and then fails (HTTP 500, as an exception in a real function) while the message's attribute
`fail_first` is larger than the number of deliveries of that message it has seen, so a test decides per message how
many deliveries fail.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from typing import Any

import functions_framework

from functions import envelopes


@functions_framework.cloud_event
def flaky(cloud_event: Any) -> None:
    message = envelopes.pubsub_message(cloud_event)
    entry = {
        "message_id": message.message_id,
        "data": message.data.decode(),
        "attributes": message.attributes,
        "publish_time": message.publish_time,
        "type": cloud_event["type"],
        "at": time.time(),
    }
    with open(os.environ["FLAKY_LOG"], "a+") as log:
        fcntl.flock(log, fcntl.LOCK_EX)
        log.seek(0)
        seen = sum(json.loads(line)["message_id"] == message.message_id for line in log if line.strip())
        log.write(json.dumps(entry) + "\n")
    if seen < int(message.attributes.get("fail_first", "0")):
        raise RuntimeError(f"fault point: delivery {seen + 1} of message {message.message_id} fails")
