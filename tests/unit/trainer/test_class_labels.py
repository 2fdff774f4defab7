"""Classification labels become class ids by sorted order, as scikit-learn's LabelEncoder does (a
CSV whose label column holds "benign"/"malignant" trains; it once failed with "expected a finite number")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainer.datasets.shards import is_validation
from trainer.datasets.tables import class_label
from trainer.datasets.tabular import TabularCorpus
from trainer.errors import DataError


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("benign", "benign"),
        ("  malignant ", "malignant"),
        ("class_0", "class_0"),
        ("1", 1),
        ("1.0", 1),
        (" 2 ", 2),
        ("-1", -1),
        (3, 3),
        (3.0, 3),
        (True, 1),
        (False, 0),
        ("007", 7),
    ],
)
def test_class_label_values(value: object, expected: int | str) -> None:
    assert class_label("f.csv", 2, "label", value) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        (None, "expected a class label"),
        (0.5, "fractional"),
        ("2.5", "fractional"),
        ("nan", "expected a class label"),
        (float("inf"), "expected a class label"),
        ([1], "expected a class label"),
    ],
)
def test_bad_class_labels_name_the_file_line_and_fix(value: object, reason: str) -> None:
    with pytest.raises(DataError, match=rf"f\.csv line 9: column 'label' .*{reason}"):
        class_label("f.csv", 9, "label", value)


def _corpus(
    folder: Path, shards: dict[str, str], task: str = "tabular-classification", world_size: int = 1
) -> TabularCorpus:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in shards.items():
        (folder / name).write_text(text)
    return TabularCorpus([str(folder / n) for n in sorted(shards)], task, "label", "auto", world_size, 0.1)


def _rows(n: int, labels: list[str]) -> str:
    return "x,label\n" + "".join(f"{i},{labels[i % len(labels)]}\n" for i in range(n))


def test_text_labels_are_sorted_into_class_ids(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, {"part-0.csv": _rows(30, ["malignant", "benign", "benign"])})
    corpus.scan(rank=0, device="cpu")
    assert corpus.spec is not None
    assert corpus.spec.classes == ("benign", "malignant") and corpus.spec.n_outputs == 2
    _, y = next(corpus.pack(corpus.records(0)))
    assert y.dtype == torch.int64 and y[:3].tolist() == [1, 0, 0]


def test_jsonl_and_csv_shards_share_one_class_table(tmp_path: Path) -> None:
    jsonl = "".join(json.dumps({"x": i, "label": label}) + "\n" for i, label in enumerate(["b", "c", "b"]))
    corpus = _corpus(tmp_path, {"part-0.csv": _rows(4, ["a", "b"]), "part-1.jsonl": jsonl})
    corpus.scan(rank=0, device="cpu")
    assert corpus.spec is not None and corpus.spec.classes == ("a", "b", "c")


def test_integer_labels_keep_numeric_order_and_may_skip_values(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, {"part-0.csv": _rows(30, ["10", "2", "-1", "2.0"])})
    corpus.scan(rank=0, device="cpu")
    assert corpus.spec is not None and corpus.spec.classes == (-1, 2, 10)
    _, y = next(corpus.pack(corpus.records(0)))
    assert y[:4].tolist() == [2, 1, 0, 1]


def test_labels_mixing_numbers_and_text_are_all_text(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, {"part-0.csv": _rows(30, ["1", "unknown", "0"])})
    corpus.scan(rank=0, device="cpu")
    assert corpus.spec is not None and corpus.spec.classes == ("0", "1", "unknown")
    _, y = next(corpus.pack(corpus.records(0)))
    assert y[:3].tolist() == [1, 2, 0]


def test_a_single_class_is_refused(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, {"part-0.csv": _rows(30, ["benign"])})
    with pytest.raises(DataError, match=r"1 class\(es\) \['benign'\]; classification needs at least two"):
        corpus.scan(rank=0, device="cpu")


def test_a_class_only_in_the_held_out_split_still_gets_an_id(tmp_path: Path) -> None:
    held = next(i for i in range(100) if is_validation(0, i, 0.1))
    labels = ["a" if i % 2 else "b" for i in range(100)]
    labels[held] = "rare"
    text = "x,label\n" + "".join(f"{i},{label}\n" for i, label in enumerate(labels))
    corpus = _corpus(tmp_path, {"part-0.csv": text})
    corpus.scan(rank=0, device="cpu")
    assert corpus.spec is not None and corpus.spec.classes == ("a", "b", "rare")


def test_regression_still_needs_numbers(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, {"part-0.csv": _rows(5, ["1.5", "benign"])}, task="tabular-regression")
    with pytest.raises(DataError, match=r"line 3: column 'label' holds 'benign'; expected a finite number"):
        corpus.scan(rank=0, device="cpu")
