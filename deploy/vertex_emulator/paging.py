"""Paging for the List* calls: `page_size` and an opaque `page_token` bound to the request's filter.

`page` pages ListCustomJobs; `page_in_order` pages ListModels and ListModelVersions. Jobs are listed newest first.
A job page's token names the last job id of the page it ends, so a following page starts right after it even
when new jobs were created in between (they have larger ids and sort before it).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from typing import TypeVar

from google.cloud.aiplatform_v1.types import CustomJob

DEFAULT_PAGE_SIZE = 100
T = TypeVar("T")


class PageTokenError(ValueError):
    """The page token was not made by this emulator for this filter."""


def _filter_digest(filter_text: str) -> str:
    return hashlib.sha256(filter_text.encode()).hexdigest()[:16]


def _job_number(job: CustomJob) -> int:
    return int(job.name.rsplit("/", 1)[-1])


def make_token(last_job: CustomJob, filter_text: str) -> str:
    document = {"after": _job_number(last_job), "filter": _filter_digest(filter_text)}
    return base64.urlsafe_b64encode(json.dumps(document).encode()).decode()


def read_token(token: str, filter_text: str) -> int:
    """The job number a page token continues after."""
    try:
        document = json.loads(base64.urlsafe_b64decode(token.encode()))
        after, digest = int(document["after"]), document["filter"]
    except (ValueError, KeyError, TypeError):
        raise PageTokenError(
            f'Invalid page_token "{token}": pass the next_page_token of a previous ListCustomJobs response.'
        ) from None
    if digest != _filter_digest(filter_text):
        raise PageTokenError("The page_token was issued for a different filter; send the same filter on every page.")
    return after


def page(jobs: Sequence[CustomJob], *, filter_text: str, page_size: int, page_token: str) -> tuple[list, str]:
    """One page of jobs (newest first) and the token of the next page ("" on the last page)."""
    if page_size < 0:
        raise PageTokenError(f"page_size must not be negative, found {page_size}.")
    size = page_size or DEFAULT_PAGE_SIZE
    ordered = sorted(jobs, key=_job_number, reverse=True)
    if page_token:
        after = read_token(page_token, filter_text)
        ordered = [job for job in ordered if _job_number(job) < after]
    chosen = ordered[:size]
    next_token = make_token(chosen[-1], filter_text) if len(ordered) > size else ""
    return chosen, next_token


def page_in_order(
    items: Sequence[T], *, request_text: str, page_size: int, page_token: str, method: str
) -> tuple[list[T], str]:
    """One page of items already in their listing order, and the next page's token ("" on the last page).

    The token holds the position where the next page starts, bound to the request's filter and order
    (`request_text`): a resource created or deleted between two pages may shift the listing by one.
    """
    if page_size < 0:
        raise PageTokenError(f"page_size must not be negative, found {page_size}.")
    size = page_size or DEFAULT_PAGE_SIZE
    start = 0
    if page_token:
        try:
            document = json.loads(base64.urlsafe_b64decode(page_token.encode()))
            start, digest = int(document["offset"]), document["request"]
        except (ValueError, KeyError, TypeError):
            raise PageTokenError(
                f'Invalid page_token "{page_token}": pass the next_page_token of a previous {method} response.'
            ) from None
        if digest != _filter_digest(request_text):
            raise PageTokenError(
                "The page_token was issued for a different filter or order_by; send the same ones on every page."
            )
    chosen = list(items[start : start + size])
    if start + size >= len(items):
        return chosen, ""
    document = {"offset": start + size, "request": _filter_digest(request_text)}
    return chosen, base64.urlsafe_b64encode(json.dumps(document).encode()).decode()
