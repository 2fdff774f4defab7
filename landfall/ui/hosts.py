"""The names the dashboard answers an action for (LANDFALL_UI_HOSTS), and whether a request's Host and Origin are
among them.

A browser sends a page's own name as Host and Origin. A page served from a name that its owner rebinds to this
machine's address (DNS rebinding) is same-origin with itself, so comparing Origin with the request's own Host lets it
act; comparing both with a list the dashboard was given does not: the rebound name is on no list.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from landfall.errors import CommandError

HOSTS_ENV = "LANDFALL_UI_HOSTS"
"""Comma list of the names an action is taken for; unset or empty: the loopback names (LOOPBACK)."""
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
"""The names of this machine: where `landfall ui` listens by default, and where `gcloud run services proxy` serves
the deployed dashboard."""

_ENTRY = re.compile(r"(?:[a-z0-9*](?:[a-z0-9*.-]{0,251}[a-z0-9*])?|\[[0-9a-f:.]{2,45}\])(?::[0-9]{1,5})?")
"""A host name (letters, digits, '-', '.', and '*' for any characters), an IPv4 address, or an IPv6 address in
brackets; optionally `:PORT`."""


def allowed_hosts(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """LANDFALL_UI_HOSTS read once, lower-cased: `NAME` answers on any port, `NAME:PORT` on that port only, and `*`
    in a name stands for any characters (`landfall-ui-*.run.app`). An entry of another form is refused, naming it."""
    text = (os.environ if env is None else env).get(HOSTS_ENV, "")
    entries = tuple(dict.fromkeys(part.strip().lower() for part in text.split(",") if part.strip()))
    for entry in entries:
        if not _ENTRY.fullmatch(entry) or entry.strip("*.:") == "":
            raise CommandError(
                f"{HOSTS_ENV}={text!r}: {entry!r} is not a host name; expected a comma list of names the dashboard "
                "is opened by, each NAME or NAME:PORT ('*' for any characters in a name), e.g. "
                f"{HOSTS_ENV}=localhost,dashboard.example.com:8443; unset, it answers {', '.join(LOOPBACK)}"
            )
    return entries or LOOPBACK


def _split(netloc: str) -> tuple[str, str]:
    """(name, port) of a Host header's value or a URL's netloc; the port "" when none is given."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        end = netloc.find("]")
        return (netloc[: end + 1], netloc[end + 2 :]) if end > 0 else (netloc, "")
    name, _, port = netloc.partition(":")
    return name, port


def host_allowed(netloc: str, hosts: tuple[str, ...]) -> bool:
    """Whether a Host value (NAME or NAME:PORT) is one of hosts."""
    name, port = _split(netloc)
    if not name:
        return False
    for entry in hosts:
        entry_name, entry_port = _split(entry)
        if _name_matches(name, entry_name) and (not entry_port or entry_port == port):
            return True
    return False


def _name_matches(name: str, entry: str) -> bool:
    """name against an entry's name, where '*' stands for any characters and nothing else is special."""
    if "*" not in entry:
        return name == entry
    return re.fullmatch(".*".join(re.escape(part) for part in entry.split("*")), name) is not None


def origin_allowed(origin: str, hosts: tuple[str, ...]) -> bool:
    """Whether an Origin header (SCHEME://NAME[:PORT]) names one of hosts; "null" (an opaque origin) never does."""
    parts = urlsplit(origin.strip())
    return parts.scheme in ("http", "https") and host_allowed(parts.netloc, hosts)


__all__ = ["HOSTS_ENV", "LOOPBACK", "allowed_hosts", "host_allowed", "origin_allowed"]
