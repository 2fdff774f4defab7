"""Errors of the planning package."""

from __future__ import annotations


class CatalogError(ValueError):
    """A catalog or quota data file broke its contract; the message names the file, the entry and the fix."""


class PlanInputError(ValueError):
    """A planning request cannot be planned as given (unknown preset, negative epochs...); says what to change."""
