"""The delivery bridge: Pub/Sub push for the local stack, with the subscription's retry and dead-letter policies.

Google's Pub/Sub emulator can push, but once pushes to an endpoint fail a few times in a row (a function killed or
answering 500) it stops pushing to it for tens of minutes, whatever the retry policy says (docs/local_stack.md).
Google Cloud keeps redelivering with the policy's back-off. So on the local stack each function's subscription is a
pull subscription, created with the topology's dead-letter policy, and this process pushes from it:

- pull, POST the push request Google sends ({"message": ..., "subscription": ..., "deliveryAttempt": N}) to the
  function, and acknowledge only once it answers 102, 200, 201, 202 or 204: nothing is acknowledged unprocessed;
  each acknowledgement is a line of the log (ACKNOWLEDGED: what tests wait on to know a message will not return);
- on any other answer, or none within the ack deadline, leave the message unacknowledged for the back-off of
  `retry_delay` (the emulator redelivers it when that deadline passes, counting one more delivery attempt);
- after the last allowed attempt, nack it at once: the emulator publishes it to the dead-letter topic with the
  attributes Google adds (CloudPubSubDeadLetterSourceDeliveryCount, ...Subscription, ...TopicPublishTime).

`python -m deploy.local.bridge --project P --endpoint NAME=URL ...` (one --endpoint per function) prints READY_LINE
once it has found every subscription, and stops on SIGTERM or SIGINT after the deliveries in flight have answered
(at most STOP_GRACE_S; what is left is redelivered when its ack deadline passes, as after a crash).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import signal
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from deploy.teams import team_topics
from deploy.topology import FunctionRoute, RetryPolicy, load_topology

READY_LINE = "landfall delivery bridge ready"
"""Printed once every subscription was found; the local stack waits for it (processes.ServiceSpec.ready_log_line)."""
ACKNOWLEDGED = "{function}: message {message_id} attempt {attempt} acknowledged"
"""The log line of a delivery the function answered with an ACK_STATUSES code and Pub/Sub took the ack of (then
` (HTTP <status>)`): that message is not delivered again. A failed attempt's line says `attempt N of M failed`."""
ACK_STATUSES = frozenset({102, 200, 201, 202, 204})
"""The HTTP answers Pub/Sub push takes as an acknowledgement; any other one, or none, is a failed delivery."""
PULL_WAIT_S = 10.0
"""How long one pull waits for messages. Each pull that comes back empty costs the emulator CPU (four pulls a
subscription that waited 2 s each took the idle stack from 4.8 to 7.7 CPU-s in 30 s; 10 s: 5.2). A stop does not wait
for them: it closes their channel, which ends them at once."""
ROOM_WAIT_S = 2.0
"""How long a pull waits for room among the deliveries in flight before it looks at the stop flag again."""
STOP_GRACE_S = 5.0
MAX_OUTSTANDING = 16
"""Deliveries in flight per subscription (Pub/Sub push also bounds outstanding messages per subscription)."""
UNAVAILABLE_RETRY_S = 1.0
PULL_TICK_S = 0.05
"""How often the emulator looks for messages for a waiting pull (measured: Pump's docstring)."""
PULLS_IN_FLIGHT = 4
"""Pulls waiting at once per subscription, started PULL_TICK_S / PULLS_IN_FLIGHT apart."""
SCHEDULED_PULLS = 1
"""Pulls waiting at once on a subscription fed by a schedule's ticks (the sweep, the reconciler): a tick a minute
loses nothing to one tick of the emulator's wait, and every waiting pull costs the emulator CPU at each of its ticks,
CPU the functions on a dataset's way to its job share on a machine of two cores (eight pulls a subscription instead
of four took marker finalize -> CreateCustomJob from p50 ~110 to ~122 ms)."""
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


@dataclass(frozen=True)
class Route:
    """One subscription the bridge pushes from, and where to."""

    function: str
    subscription: str
    """projects/P/subscriptions/S"""
    endpoint: str
    ack_deadline_seconds: int
    retry: RetryPolicy
    max_delivery_attempts: int
    pulls: int = PULLS_IN_FLIGHT
    """Pulls waiting at once on the subscription (SCHEDULED_PULLS for a schedule's topic)."""


def routes_for(
    functions: Sequence[FunctionRoute],
    project: str,
    endpoints: Mapping[str, str],
    also: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    scheduled_topics: frozenset[str] = frozenset(),
) -> list[Route]:
    """A Route per function that has an endpoint; every endpoint must name a function of the topology. `also`: more
    (subscription, topic) a function is fed from (the teams' requests topics to the dispatcher, docs/teams.md),
    pushed to the endpoint's path /projects/P/topics/T, as `landfall deploy` sets them: functions-framework makes the
    topic the event's source. A function fed by one of scheduled_topics waits with SCHEDULED_PULLS pulls."""
    known = {f.name: f for f in functions}
    unknown = sorted(set(endpoints) - set(known))
    if unknown:
        raise ValueError(f"--endpoint names unknown functions {unknown}; the topology has {sorted(known)}")
    return [
        Route(
            function=f.name,
            subscription=f"projects/{project}/subscriptions/{f.subscription}",
            endpoint=endpoints[f.name],
            ack_deadline_seconds=f.ack_deadline_seconds,
            retry=f.retry,
            max_delivery_attempts=f.dead_letter.max_delivery_attempts,
            pulls=SCHEDULED_PULLS if f.topic in scheduled_topics else PULLS_IN_FLIGHT,
        )
        for f in functions
        if f.name in endpoints
    ] + [
        Route(
            function=f.name,
            subscription=f"projects/{project}/subscriptions/{extra}",
            endpoint=f"{endpoints[f.name].rstrip('/')}/projects/{project}/topics/{topic}",
            ack_deadline_seconds=f.ack_deadline_seconds,
            retry=f.retry,
            max_delivery_attempts=f.dead_letter.max_delivery_attempts,
        )
        for f in functions
        if f.name in endpoints
        for extra, topic in (also or {}).get(f.name, ())
    ]


def retry_delay(policy: RetryPolicy, failed_attempt: int) -> int:
    """Seconds before redelivering a message whose delivery `failed_attempt` (1 = the first) failed: the minimum
    back-off, doubled for every earlier failure, capped at the maximum."""
    if failed_attempt < 1:
        raise ValueError(f"delivery attempts count from 1, got {failed_attempt}")
    doubled = policy.minimum_backoff_seconds << min(failed_attempt - 1, 30)  # x 2 per earlier failure
    return min(policy.maximum_backoff_seconds, doubled)


def rfc3339(value: Any) -> str:
    """A publish time as Pub/Sub push writes it: RFC 3339 in UTC with a Z."""
    text = value.rfc3339() if hasattr(value, "rfc3339") else value.isoformat()
    return str(text).replace("+00:00", "Z")


def push_body(message: Any, subscription: str, delivery_attempt: int) -> dict[str, Any]:
    """The JSON body of Google's push request for one PubsubMessage. Both spellings of the id and the time are
    there, as in Google's push; deliveryAttempt is there when the subscription has a dead-letter policy (> 0)."""
    published = rfc3339(message.publish_time)
    body_message: dict[str, Any] = {
        "data": base64.b64encode(bytes(message.data)).decode("ascii"),
        "messageId": message.message_id,
        "message_id": message.message_id,
        "publishTime": published,
        "publish_time": published,
    }
    if message.attributes:
        body_message["attributes"] = dict(message.attributes)
    if message.ordering_key:
        body_message["orderingKey"] = message.ordering_key
    body: dict[str, Any] = {"message": body_message, "subscription": subscription}
    if delivery_attempt > 0:
        body["deliveryAttempt"] = delivery_attempt
    return body


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Push does not follow redirects: a 3xx answer is a failed delivery like any other non-acknowledging status."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def post(url: str, body: Mapping[str, Any], timeout_s: float) -> tuple[int | None, str]:
    """POST body as JSON; returns (HTTP status, "") or (None, why nothing usable came back)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            response.read()
            return int(response.status), ""
    except urllib.error.HTTPError as exc:
        return int(exc.code), str(exc.reason)
    except urllib.error.URLError as exc:
        return None, str(exc.reason)
    except (OSError, http.client.HTTPException) as exc:
        return None, f"{exc.__class__.__name__}: {exc}"


def _say(text: str) -> None:
    """One line of the bridge's log, stamped with the UTC time (retries are read against it)."""
    print(f"{datetime.now(UTC).isoformat(timespec='milliseconds').replace('+00:00', 'Z')} {text}", flush=True)


Report = Callable[[str], None]
"""Where the bridge writes what happened (a failed delivery, a dead letter, a pull error): one line each."""


class Pump:
    """Pulls one subscription and delivers each message on its own thread, at most MAX_OUTSTANDING at a time.

    The emulator answers a waiting pull only on a tick of its own, about every PULL_TICK_S after the pull arrived (a
    message published to one waiting pull reached it after 4-54 ms, 28 ms at the median). So PULLS_IN_FLIGHT pulls
    wait at once, started PULL_TICK_S / PULLS_IN_FLIGHT apart, and whichever ticks first takes the message: 10 ms
    at the median with four. Pub/Sub push in Google Cloud has no such tick. The pulls share MAX_OUTSTANDING: each
    reserves the messages it may take before it asks."""

    def __init__(
        self,
        route: Route,
        subscriber: Any,
        stopping: threading.Event,
        report: Report,
        max_outstanding: int = MAX_OUTSTANDING,
        pulls: int | None = None,
        puller: Any = None,
    ) -> None:
        """subscriber settles messages; puller (default: subscriber) pulls them: a client of its own, which a stop
        closes to end the waiting pulls while the deliveries in flight still settle through subscriber."""
        self.route = route
        self._say = report
        self._subscriber = subscriber
        self._puller = puller if puller is not None else subscriber
        self._stopping = stopping
        self._max = max_outstanding
        self._in_flight = 0
        self._reserved = 0
        """Messages the waiting pulls may take (counted against max_outstanding with the deliveries in flight)."""
        self._failing = False
        self._changed = threading.Condition()
        self.threads = [
            threading.Thread(target=self._pull_loop, name=f"pump-{route.function}-{i}", daemon=True)
            for i in range(max(1, min(route.pulls if pulls is None else pulls, max_outstanding)))
        ]

    def start(self) -> None:
        for i, thread in enumerate(self.threads):
            if i and self._stopping.wait(PULL_TICK_S / len(self.threads)):
                return
            thread.start()

    def join(self, timeout_s: float) -> None:
        for thread in self.threads:
            if thread.is_alive():
                thread.join(timeout_s)

    def idle(self, timeout_s: float) -> bool:
        """Wait until no delivery is in flight (at most timeout_s); True if none is."""
        with self._changed:
            return self._changed.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)

    def _reserve(self) -> int:
        """Messages the next pull may take (0 when none may after ROOM_WAIT_S): an equal share of the room left."""
        with self._changed:
            self._changed.wait_for(lambda: self._in_flight + self._reserved < self._max, timeout=ROOM_WAIT_S)
            room = self._max - self._in_flight - self._reserved
            if room <= 0:
                return 0
            take = max(1, room // len(self.threads))
            self._reserved += take
            return take

    def _settle_reservation(self, take: int, received: int = 0) -> None:
        """A pull that reserved `take` came back with `received` messages, now deliveries in flight."""
        with self._changed:
            self._reserved -= take
            self._in_flight += received
            self._changed.notify_all()

    def _pull_loop(self) -> None:
        from google.api_core import exceptions as gexc

        while not self._stopping.is_set():
            take = self._reserve()
            if take == 0:
                continue
            try:
                response = self._puller.pull(
                    request={"subscription": self.route.subscription, "max_messages": take},
                    timeout=PULL_WAIT_S,
                    retry=None,
                )
            except gexc.DeadlineExceeded:
                self._settle_reservation(take)
                continue
            except Exception as exc:  # a pump that died would stop this subscription's deliveries for good
                self._settle_reservation(take)
                if self._stopping.is_set():  # the stop closed the pulls' channel
                    return
                if not self._failing:
                    detail = exc.message if isinstance(exc, gexc.GoogleAPICallError) else exc
                    self._say(
                        f"{self.route.function}: pull from {self.route.subscription} failed "
                        f"({exc.__class__.__name__}: {detail}); retrying every {UNAVAILABLE_RETRY_S:g}s"
                    )
                self._failing = True
                self._stopping.wait(UNAVAILABLE_RETRY_S)
                continue
            if self._failing:
                self._failing = False
                self._say(f"{self.route.function}: pulling from {self.route.subscription} again")
            received_messages = list(response.received_messages)
            self._settle_reservation(take, len(received_messages))
            for received in received_messages:
                threading.Thread(
                    target=self._deliver_one, args=(received,), daemon=True, name=f"deliver-{self.route.function}"
                ).start()

    def _deliver_one(self, received: Any) -> None:
        try:
            self.deliver(received)
        except Exception:  # left unsettled, the message comes back when its ack deadline passes
            self._say(
                f"{self.route.function}: delivering message {received.message.message_id} failed in the "
                f"bridge; it is redelivered when its ack deadline passes:\n{traceback.format_exc()}"
            )
        finally:
            with self._changed:
                self._in_flight -= 1
                self._changed.notify_all()

    def deliver(self, received: Any) -> None:
        """Push one received message and settle it: acknowledge, leave for the back-off, or dead-letter."""
        route = self.route
        attempt = int(received.delivery_attempt)
        message_id = received.message.message_id
        started = time.monotonic()
        status, why = post(
            route.endpoint, push_body(received.message, route.subscription, attempt), route.ack_deadline_seconds
        )
        if status in ACK_STATUSES:
            if self._settle("acknowledge", received.ack_id, None, message_id):
                acknowledged = ACKNOWLEDGED.format(function=route.function, message_id=message_id, attempt=attempt)
                self._say(f"{acknowledged} (HTTP {status})")
            return
        answer = f"HTTP {status}" if status is not None else f"no answer ({why})"
        if time.monotonic() - started >= route.ack_deadline_seconds:
            self._say(
                f"{route.function}: message {message_id} attempt {attempt} failed: {answer} within the ack "
                f"deadline ({route.ack_deadline_seconds}s); Pub/Sub redelivers it now"
            )
            return
        if attempt >= route.max_delivery_attempts:
            self._say(
                f"{route.function}: message {message_id} attempt {attempt} of {route.max_delivery_attempts} "
                f"failed: {answer}; dead-lettered"
            )
            self._settle("modify_ack_deadline", received.ack_id, 0, message_id)
            return
        delay = retry_delay(route.retry, max(attempt, 1))
        self._say(
            f"{route.function}: message {message_id} attempt {attempt} of {route.max_delivery_attempts} "
            f"failed: {answer}; next attempt in {delay}s"
        )
        self._settle("modify_ack_deadline", received.ack_id, delay, message_id)

    def _settle(self, how: str, ack_id: str, seconds: int | None, message_id: str) -> bool:
        """Acknowledge, or set the ack deadline (0: dead-letter or redeliver now); False (and said) if it failed."""
        from google.api_core import exceptions as gexc

        request: dict[str, Any] = {"subscription": self.route.subscription, "ack_ids": [ack_id]}
        if seconds is not None:
            request["ack_deadline_seconds"] = seconds
        try:
            getattr(self._subscriber, how)(request=request)
        except gexc.GoogleAPICallError as exc:
            self._say(
                f"{self.route.function}: {how} of message {message_id} failed ({exc.__class__.__name__}: "
                f"{exc.message}); Pub/Sub redelivers it when its ack deadline passes"
            )
            return False
        return True


MESSAGE_LENGTH_OPTIONS = (("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1))
"""The gRPC channel options Google's own Pub/Sub transport opens its channel with (no size limit: the service holds
messages to 10 MB, https://cloud.google.com/pubsub/quotas#resource_limits). The client library opens its channel to
the emulator without them, so gRPC's default 4 MB receive limit made a pull holding a 9 MB message fail every time
(RESOURCE_EXHAUSTED) and the subscription delivered nothing."""


def emulator_subscriber(host: str) -> Any:
    """A SubscriberClient for the Pub/Sub emulator at host that takes every message Pub/Sub takes."""
    import grpc
    from google.cloud import pubsub_v1
    from google.pubsub_v1.services.subscriber.transports.grpc import SubscriberGrpcTransport

    channel = grpc.insecure_channel(host, options=MESSAGE_LENGTH_OPTIONS)
    return pubsub_v1.SubscriberClient(transport=SubscriberGrpcTransport(channel=channel))


class Bridge:
    """Every route's pump, started and stopped together."""

    def __init__(self, routes: Sequence[Route], max_outstanding: int = MAX_OUTSTANDING, report: Report = _say) -> None:
        from google.cloud import pubsub_v1

        host = os.environ.get("PUBSUB_EMULATOR_HOST")
        self._subscriber = emulator_subscriber(host) if host else pubsub_v1.SubscriberClient()
        self._puller = emulator_subscriber(host) if host else pubsub_v1.SubscriberClient()
        self._stopping = threading.Event()
        self.pumps = [
            Pump(route, self._subscriber, self._stopping, report, max_outstanding, puller=self._puller)
            for route in routes
        ]

    def check_subscriptions(self) -> None:
        """Raise LookupError naming the first subscription the emulator does not have."""
        from google.api_core.exceptions import NotFound

        for pump in self.pumps:
            try:
                self._subscriber.get_subscription(request={"subscription": pump.route.subscription}, timeout=10)
            except NotFound as exc:
                raise LookupError(
                    f"subscription {pump.route.subscription} does not exist on the Pub/Sub emulator "
                    f"at {os.environ.get('PUBSUB_EMULATOR_HOST')}; `landfall up` creates it"
                ) from exc

    def start(self) -> None:
        threads = [threading.Thread(target=pump.start, daemon=True) for pump in self.pumps]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def stop(self, grace_s: float = STOP_GRACE_S) -> bool:
        """Stop pulling, then wait up to grace_s for the deliveries in flight; True if all of them answered. A message
        a closed pull had taken is redelivered when its ack deadline passes, as after a crash."""
        self._stopping.set()
        self._puller.close()
        for pump in self.pumps:
            pump.join(ROOM_WAIT_S + 1)
        deadline = time.monotonic() + grace_s
        settled = all(pump.idle(max(0.0, deadline - time.monotonic())) for pump in self.pumps)
        self._subscriber.close()
        return settled


def _endpoints(values: Sequence[str]) -> dict[str, str]:
    endpoints: dict[str, str] = {}
    for value in values:
        name, _, url = value.partition("=")
        if not name or not url.startswith(("http://", "https://")):
            raise ValueError(f"--endpoint expects FUNCTION=http://HOST:PORT/, got {value!r}")
        endpoints[name] = url
    return endpoints


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.local.bridge",
        description="Push each function's Pub/Sub subscription to its endpoint, with "
        "the topology's retry and dead-letter policies.",
    )
    parser.add_argument(
        "--project",
        default=os.environ.get("GOOGLE_CLOUD_PROJECT") or load_topology().project_id,
        help="project of the subscriptions (default: GOOGLE_CLOUD_PROJECT, else the topology's)",
    )
    parser.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar="FUNCTION=URL",
        required=True,
        help="push FUNCTION's subscription to URL (repeatable)",
    )
    parser.add_argument(
        "--max-outstanding",
        type=int,
        default=MAX_OUTSTANDING,
        metavar="N",
        help=f"deliveries in flight per subscription (default {MAX_OUTSTANDING})",
    )
    args = parser.parse_args(argv)
    if not os.environ.get("PUBSUB_EMULATOR_HOST"):
        parser.error(
            "PUBSUB_EMULATOR_HOST is not set: the bridge stands in for Pub/Sub push on the local stack "
            "only (`landfall up` starts it)"
        )
    if args.max_outstanding < 1:
        parser.error(f"--max-outstanding must be >= 1, got {args.max_outstanding}")
    try:
        topology = load_topology()
        teams = [(t.requests_subscription, t.requests_topic) for t in team_topics(os.environ)]
        also = {topology.fed_by(topology.requests_topic).name: teams}
        scheduled = frozenset(s.topic for s in topology.schedules)
        routes = routes_for(topology.functions, args.project, _endpoints(args.endpoint), also, scheduled)
    except ValueError as exc:
        parser.error(str(exc))
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # before the client starts its threads: they inherit it
    bridge = Bridge(routes, args.max_outstanding)
    try:
        bridge.check_subscriptions()
    except LookupError as exc:
        print(f"landfall delivery bridge: {exc}", file=sys.stderr, flush=True)
        return 1
    bridge.start()
    _say(
        f"{READY_LINE}: "
        + ", ".join(
            f"{r.subscription} -> {r.endpoint} (back-off {r.retry.minimum_backoff_seconds}"
            f"-{r.retry.maximum_backoff_seconds}s, dead letter after "
            f"{r.max_delivery_attempts})"
            for r in routes
        )
    )
    received = signal.sigwaitinfo(STOP_SIGNALS)
    settled = bridge.stop()
    _say(
        f"landfall delivery bridge stopped by {signal.Signals(received.si_signo).name}"
        + ("" if settled else "; deliveries still in flight are redelivered when their ack deadline passes")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
