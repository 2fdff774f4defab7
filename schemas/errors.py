"""The one error type every schema parse raises."""

from __future__ import annotations


class SchemaError(ValueError):
    """A message or record broke the contract. `field` names the offending field (dotted path) when known."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field and not message.startswith(field) else message)
