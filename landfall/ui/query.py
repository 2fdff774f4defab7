"""What the dashboard takes from a URL: the runs page's query parameters and a run id in a path, each checked before
anything is asked of Firestore. A value that does not fit is a BadParameter naming the parameter and what was
expected (the pages answer 400), never an error from deep inside a client (a run id with a '/' is a document path
there)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from deploy.teams import is_team_name
from landfall.ui import views
from landfall.ui.source import RunsQuery
from landfall.words import STATES_TEXT
from schemas.errors import SchemaError
from schemas.run_record import parse_state

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""A run id as Landfall makes them (`run-` and hex digits), or any id of that alphabet: never a path ('/'), '.' or
'..', or a name Firestore keeps for itself (`__...__`)."""
DATASET_CHARS = 1024
"""The longest dataset URI the filter takes (a bucket name and an object prefix; Firestore compares at most 1,500
bytes of an indexed value)."""


class BadParameter(ValueError):
    """A URL value the dashboard cannot use; the message names it and says what was expected."""

    def __init__(self, name: str, message: str) -> None:
        self.name = name
        super().__init__(f"{name}: {message}")


def run_id(text: str, name: str = "run id") -> str:
    """A run id from a URL, or BadParameter."""
    if not RUN_ID.fullmatch(text):
        raise BadParameter(
            name,
            f"{text[:80]!r} is not a run id; expected letters, digits, '-', '_' and '.' (at most 128, starting with a "
            "letter or digit), as `landfall runs` lists them",
        )
    return text


def _state(text: str) -> str | None:
    state = text.strip().upper()
    if not state:
        return None
    try:
        return parse_state(state).value
    except SchemaError:
        raise BadParameter("state", f"{text[:40]!r} is not a run state; the states are {STATES_TEXT}") from None


def _dataset(text: str) -> str | None:
    uri = text.strip()
    if not uri:
        return None
    if not uri.startswith("gs://") or len(uri) > DATASET_CHARS or not uri.isprintable():
        raise BadParameter(
            "dataset",
            f"{uri[:80]!r} is not a dataset URI; expected gs://BUCKET/PREFIX/ (at most {DATASET_CHARS} characters), "
            "as the Datasets page lists them",
        )
    return uri


def _team(text: str) -> str | None:
    team = text.strip()
    if not team:
        return None
    if not is_team_name(team):
        raise BadParameter(
            "team",
            f"{team[:80]!r} is not a team name; expected lower-case letters, digits and '-', starting with a letter "
            "(at most 40), as the Teams page lists them",
        )
    return team


def _since(text: str) -> datetime | None:
    try:
        return views.parse_since(text)
    except SchemaError:
        raise BadParameter(
            "since",
            f"{text[:80]!r} is not a date (2026-11-22) or an RFC 3339 time with a zone (2026-11-22T10:00:00Z)",
        ) from None


def _after(text: str) -> str | None:
    return run_id(text.strip(), "after") if text.strip() else None


RUNS_PARAMETERS = ("state", "dataset", "team", "since", "after")
"""The runs page's parameters (and its rows', which the page asks for with the same ones)."""


def runs_query(params: Mapping[str, str]) -> RunsQuery:
    """The runs page's filters and cursor from its query parameters; an unknown parameter or a bad value is a
    BadParameter naming it."""
    for name in params:
        if name not in RUNS_PARAMETERS:
            raise BadParameter(name[:40], f"is not a parameter of the runs page; it takes {', '.join(RUNS_PARAMETERS)}")
    return RunsQuery(
        state=_state(params.get("state", "")),
        dataset=_dataset(params.get("dataset", "")),
        team=_team(params.get("team", "")),
        since=_since(params.get("since", "")),
        after=_after(params.get("after", "")),
    )


__all__ = ["RUNS_PARAMETERS", "BadParameter", "run_id", "runs_query"]
