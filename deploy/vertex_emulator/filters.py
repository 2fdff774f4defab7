"""The List* filter language, as documented for `ListCustomJobsRequest.filter`, `ListModelsRequest.filter` and
`ListModelVersionsRequest.filter`.

Supported for custom jobs (JOB_FIELDS), exactly as Vertex documents it:

- `display_name` with `=`, `!=` and `:` (wildcard match, `*` matches any run of characters)
- `state` with `=`, `!=` (`JOB_STATE_RUNNING`, ...)
- `create_time` with `=`, `!=`, `<`, `<=`, `>`, `>=` against an RFC 3339 timestamp
- `update_time`, in the same syntax as `create_time`. ListCustomJobs' reference lists only create_time among the
  times; ListPipelineJobs documents update_time (and end_time) with exactly these operators and format, and
  Landfall's reconciler asks for jobs changed since its last pass with it (docs/deploy.md, "The reconciler's Vertex
  calls", says what Landfall does if Vertex refuses it)
- `labels.KEY=VALUE`, `labels.KEY!=VALUE`, `labels.KEY:*` (key exists), `labels.KEY:PATTERN`, `labels:KEY`
- `AND`, `OR`, `NOT`, parentheses; terms side by side mean AND. As in Google's filter standard (AIP-160),
  OR binds tighter than AND: `a AND b OR c` is `a AND (b OR c)`.

For models (MODEL_FIELDS): `model` (the model id) and `display_name` with `=` and `!=`, and `labels` as above; for
model versions (VERSION_FIELDS): `labels` only. Model filters take the camelCase spellings too (`displayName`), as
Vertex documents. Values may be quoted ("...") or bare words. Anything else is refused with FilterError naming what was
expected, which the server answers as INVALID_ARGUMENT.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from google.cloud.aiplatform_v1.types import JobState

from deploy.vertex_emulator.wellknown import time_of

Predicate = Callable[[Any], bool]
"""A test on one listed resource (a CustomJob or a Model): they share display_name, labels and create_time."""


@dataclass(frozen=True)
class Field:
    """One filterable field: the operators it takes and how a comparison on it becomes a predicate."""

    operators: tuple[str, ...]
    comparator: Callable[[str, str, str], Predicate]
    """(label key or "", operator, value) -> predicate."""


KEYWORDS = ("AND", "OR", "NOT")
_TOKEN = re.compile(
    r'\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<op><=|>=|!=|=|<|>|:)|(?P<paren>[()])|(?P<word>[^\s()=<>!:"]+))'
)


class FilterError(ValueError):
    """The filter text is not in the supported grammar."""


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        kind = match.lastgroup if match is not None else None  # every alternative is a named group
        if match is None or kind is None or match.end() == position:
            raise FilterError(f'Unexpected character at position {position} of filter "{text}".')
        value = match.group(kind)
        if kind == "string":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        tokens.append((kind, value))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str, fields: Mapping[str, Field], aliases: Mapping[str, str]) -> None:
        self.text = text
        self.fields = fields
        self.aliases = aliases
        self.tokens = _tokenize(text)
        self.position = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise FilterError(f'Filter "{self.text}" ends too early: expected a field, a value or ")".')
        self.position += 1
        return token

    def is_keyword(self, word: str) -> bool:
        return self.peek() == ("word", word)

    def parse(self) -> Predicate:
        predicate = self.conjunction()
        left = self.peek()
        if left is not None:
            raise FilterError(f'Unexpected "{left[1]}" in filter "{self.text}".')
        return predicate

    def conjunction(self) -> Predicate:
        terms = [self.disjunction()]
        while self.peek() is not None and self.peek() != ("paren", ")"):
            if self.is_keyword("AND"):
                self.take()
            terms.append(self.disjunction())
        return terms[0] if len(terms) == 1 else (lambda job: all(term(job) for term in terms))

    def disjunction(self) -> Predicate:
        terms = [self.unary()]
        while self.is_keyword("OR"):
            self.take()
            terms.append(self.unary())
        return terms[0] if len(terms) == 1 else (lambda job: any(term(job) for term in terms))

    def unary(self) -> Predicate:
        if self.is_keyword("NOT"):
            self.take()
            inner = self.unary()
            return lambda job: not inner(job)
        if self.peek() == ("paren", "("):
            self.take()
            inner = self.conjunction()
            if self.take() != ("paren", ")"):
                raise FilterError(f'Missing ")" in filter "{self.text}".')
            return inner
        return self.comparison()

    def comparison(self) -> Predicate:
        kind, field = self.take()
        if kind != "word" or field in KEYWORDS:
            raise FilterError(f'Expected a field name in filter "{self.text}", found "{field}".')
        name, _, key = field.partition(".")
        name = self.aliases.get(name, name)
        if name not in self.fields or (key and name != "labels"):
            supported = ", ".join("labels.KEY" if known == "labels" else known for known in self.fields)
            raise FilterError(f'Unsupported filter field "{field}". Supported: {supported}.')
        operators = self.fields[name].operators
        kind, operator = self.take()
        if kind != "op" or operator not in operators:
            raise FilterError(f'Field "{name}" supports the operators {", ".join(operators)}; found "{operator}".')
        kind, value = self.take()
        if kind not in ("word", "string"):
            raise FilterError(f'Expected a value after "{field}{operator}" in filter "{self.text}".')
        return self.fields[name].comparator(key, operator, value)


def _display_name(_key: str, operator: str, value: str) -> Predicate:
    if operator == ":":
        return lambda job: fnmatchcase(job.display_name, value.replace("[", "[[]").replace("?", "[?]"))
    equal = operator == "="
    return lambda job: (job.display_name == value) == equal


def _state(_key: str, operator: str, value: str) -> Predicate:
    try:
        state = JobState[value]
    except KeyError:
        raise FilterError(f'Unknown state "{value}". Expected one of: {", ".join(s.name for s in JobState)}.') from None
    equal = operator == "="
    return lambda job: (job.state == state) == equal


_TIME_OPS: dict[str, Callable[[datetime, datetime], bool]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _time_field(field: str) -> Callable[[str, str, str], Predicate]:
    """The comparator of a timestamp field (create_time, update_time): the resource's time against an RFC 3339 value;
    one without that time matches nothing."""

    def comparator(_key: str, operator: str, value: str) -> Predicate:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise FilterError(
                f'{field} needs an RFC 3339 timestamp such as "2021-05-18T00:00:00Z"; found "{value}".'
            ) from None
        if moment.tzinfo is None:
            raise FilterError(f'{field} "{value}" has no time zone; end it with "Z" or an offset such as "+00:00".')
        compare = _TIME_OPS[operator]

        def matches(job: Any) -> bool:
            at = time_of(getattr(job, field))
            return at is not None and compare(at, moment)

        return matches

    return comparator


def _labels(key: str, operator: str, value: str) -> Predicate:
    if not key:
        if operator != ":":
            raise FilterError(f'Use "labels.KEY{operator}VALUE" or "labels:KEY"; found "labels{operator}{value}".')
        return lambda job: value in job.labels
    if operator == ":":
        return lambda job: key in job.labels and fnmatchcase(job.labels[key], value)
    equal = operator == "="
    return lambda job: (key in job.labels and job.labels[key] == value) == equal


def _model(_key: str, operator: str, value: str) -> Predicate:
    equal = operator == "="
    return lambda model: (model.name.rsplit("/", 1)[-1] == value) == equal


JOB_FIELDS: Mapping[str, Field] = {
    "display_name": Field(("=", "!=", ":"), _display_name),
    "state": Field(("=", "!="), _state),
    "create_time": Field(("=", "!=", "<", "<=", ">", ">="), _time_field("create_time")),
    "update_time": Field(("=", "!=", "<", "<=", ">", ">="), _time_field("update_time")),
    "labels": Field(("=", "!=", ":"), _labels),
}
MODEL_FIELDS: Mapping[str, Field] = {
    "model": Field(("=", "!="), _model),
    "display_name": Field(("=", "!="), _display_name),
    "labels": Field(("=", "!=", ":"), _labels),
}
VERSION_FIELDS: Mapping[str, Field] = {"labels": Field(("=", "!=", ":"), _labels)}
CAMEL_CASE = {"displayName": "display_name", "createTime": "create_time"}
"""ListModels and ListModelVersions take both spellings ("For field names both snake_case and camelCase are
supported"); ListCustomJobs documents snake_case only."""


def parse_filter(text: str, fields: Mapping[str, Field] = JOB_FIELDS) -> Predicate:
    """A predicate for a List* filter over `fields` (ListCustomJobs' by default); an empty filter matches all."""
    if not text.strip():
        return lambda item: True
    return _Parser(text, fields, {} if fields is JOB_FIELDS else CAMEL_CASE).parse()
