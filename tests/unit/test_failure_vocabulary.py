"""The failure reasons and the trainer's failure kinds are one vocabulary (schemas/vocabulary.py), tied to the
trainer's error classes (trainer/errors.py) here, not by a second list of class names: a new error class without a
reason, or a kind whose class is gone, fails."""

from __future__ import annotations

import inspect

import pytest

from functions.records.failure_reasons import REASON_FOR_TEXT, classify
from schemas.vocabulary import (
    CAPACITY_REASONS,
    FAILURE_REASONS,
    REASON_FOR_TRAINER_KIND,
    TRAINER_FAILURE_KINDS,
)
from trainer import errors
from trainer.failure import failure_of

VERTEX_SAYS = "The replica workerpool0-0 exited with a non-zero status of 3. Termination reason: Error."


def trainer_error_classes() -> dict[str, type[errors.TrainerError]]:
    return {
        cls.__name__: cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.TrainerError) and cls.__module__ == errors.__name__
    }


def an_error(cls: type[errors.TrainerError]) -> errors.TrainerError:
    return cls("gs://b/d/part-0.csv", "no label column") if issubclass(cls, errors.DataError) else cls("boom")


def test_every_trainer_error_class_is_a_failure_kind_and_no_kind_lacks_its_class() -> None:
    assert set(trainer_error_classes()) == set(TRAINER_FAILURE_KINDS)


def test_each_kind_means_a_failure_reason() -> None:
    assert set(REASON_FOR_TRAINER_KIND) == set(TRAINER_FAILURE_KINDS)
    assert set(REASON_FOR_TRAINER_KIND.values()) <= set(FAILURE_REASONS)
    assert set(FAILURE_REASONS) >= CAPACITY_REASONS


@pytest.mark.parametrize("kind", sorted(TRAINER_FAILURE_KINDS))
def test_the_record_of_a_trainer_error_is_classified_as_its_kinds_reason(kind: str) -> None:
    exc = an_error(trainer_error_classes()[kind])
    failure = failure_of(exc, exc.exit_code, {})
    assert failure.kind == kind
    assert classify(failure.kind, VERTEX_SAYS, 3).reason == REASON_FOR_TRAINER_KIND[kind]


def test_every_reason_the_rules_give_is_in_the_vocabulary() -> None:
    given = {reason for _, reason in REASON_FOR_TEXT}
    given |= {classify(None, "", code).reason for code in range(17)}
    given.add(classify("RuntimeError", "", 0).reason)  # a crash
    assert given <= set(FAILURE_REASONS)
