"""Readers and shard plans: formats, bad data named by file and line, deterministic and complete assignment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import datagen
from trainer.datasets.shards import UnitPlan, data_files, is_validation
from trainer.datasets.stream import steps_in_epoch, train_batches
from trainer.datasets.tables import read_rows, read_schema
from trainer.datasets.tabular import TabularCorpus
from trainer.datasets.text import TextCorpus
from trainer.errors import DataError


def _corpus(root: Path, world: int = 1, **kw) -> TabularCorpus:
    return TabularCorpus(
        data_files(str(root)),
        "tabular-classification",
        kw.get("label", "label"),
        "auto",
        world,
        kw.get("val_fraction", 0.1),
    )


@pytest.mark.parametrize(
    ("name", "content", "fragment", "line"),
    [
        ("ragged.csv", "a,b,label\n1,2,0\n3,4\n", "has 2 fields; the header has 3", 3),
        ("words.csv", "a,b,label\n1,2,0\n1,two,1\n", "column 'b' holds 'two'", 3),
        ("nan.csv", "a,b,label\n1,nan,0\n", "expected a finite number", 2),
        ("latin1.csv", b"a,b,label\n1,2,0\n" + b"3,\xe9,1\n", "is not UTF-8", 3),
        ("bad.jsonl", '{"a": 1, "label": 0}\n{"a": 2}\n', "lacks ['label']", 2),
        ("broken.jsonl", '{"a": 1, "label": 0}\n{"a": \n', "is not valid JSON", 2),
    ],
)
def test_bad_rows_fail_naming_file_and_line(tmp_path: Path, name: str, content, fragment: str, line: int) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    fmt = "jsonl" if name.endswith("jsonl") else "csv"
    schema = read_schema(str(path), fmt, "label")
    with pytest.raises(DataError) as caught:
        list(read_rows(str(path), fmt, schema))
    assert fragment in str(caught.value) and f"{path} line {line}" in str(caught.value)
    assert caught.value.line == line


def test_missing_label_column_names_the_columns_and_the_flag(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("a,b,target\n1,2,0\n")
    with pytest.raises(DataError, match=r"no label column 'label'; columns are \['a', 'b', 'target'\].*--label-col"):
        _corpus(tmp_path)


def test_empty_shard_fails_when_scanned(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text(datagen.csv_text(datagen.separable_rows(50, 1)))
    (tmp_path / "b.csv").write_text("a,b,c,label\n")
    with pytest.raises(DataError, match=r"b\.csv: has no data rows \(an empty shard\)"):
        _corpus(tmp_path).scan(rank=0, device="cpu")


def test_non_utf8_text_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_bytes(b"hello\nworld\n\xff\xfe oops\n")
    corpus = TextCorpus(data_files(str(tmp_path)), 8, "auto", 1, 0.0)
    with pytest.raises(DataError, match=r"t\.txt line 3: is not UTF-8"):
        corpus.scan(rank=0, device="cpu")


def test_no_data_files_only_markers(tmp_path: Path) -> None:
    (tmp_path / "_SUCCESS").write_text("")
    with pytest.raises(DataError, match="no data files found"):
        data_files(str(tmp_path))


def test_parquet_jsonl_and_csv_give_the_same_rows(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = datagen.separable_rows(30, 5)
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "d.csv").write_text(datagen.csv_text(rows))
    (tmp_path / "jsonl").mkdir()
    (tmp_path / "jsonl" / "d.jsonl").write_text(
        "".join(json.dumps({"label": y, "c": c, "a": a, "b": b}) + "\n" for a, b, c, y in rows)
    )
    (tmp_path / "pq").mkdir()
    table = pa.table(
        {"a": [r[0] for r in rows], "b": [r[1] for r in rows], "c": [r[2] for r in rows], "label": [r[3] for r in rows]}
    )
    pq.write_table(table, tmp_path / "pq" / "d.parquet")
    out = {}
    for sub, fmt in (("csv", "csv"), ("jsonl", "jsonl"), ("pq", "parquet")):
        uri = data_files(str(tmp_path / sub))[0]
        schema = read_schema(uri, fmt, "label")
        out[fmt] = [(f, y) for _, f, y in read_rows(uri, fmt, schema)]
        assert sorted(schema.features) == ["a", "b", "c"]
    # JSONL lists keys in another order: compare by column name.
    assert [y for _, y in out["csv"]] == [y for _, y in out["jsonl"]] == [y for _, y in out["parquet"]]
    assert out["csv"][0][0] == pytest.approx([round(rows[0][0], 5), round(rows[0][1], 5), round(rows[0][2], 3)])
    assert out["parquet"][0][0] == pytest.approx(list(rows[0][:3]))


@pytest.mark.parametrize(("shards", "world"), [(5, 2), (2, 4), (1, 3), (3, 3)])
def test_every_record_belongs_to_exactly_one_rank_per_epoch(shards: int, world: int) -> None:
    plan = UnitPlan(shards, world)
    for epoch in range(3):
        dealt = [u for r in range(world) for u in plan.epoch_units(seed=1, epoch=epoch, rank=r)]
        assert sorted(dealt) == list(range(plan.n_units))
        assert all(plan.epoch_units(1, epoch, r) for r in range(world))  # nobody is idle
    assert plan.epoch_order(1, 0) == UnitPlan(shards, world).epoch_order(1, 0)


def test_validation_split_is_stable_and_near_the_fraction() -> None:
    held = [is_validation(0, i, 0.2) for i in range(5000)]
    assert 0.17 < sum(held) / len(held) < 0.23
    assert held == [is_validation(0, i, 0.2) for i in range(5000)]
    assert not any(is_validation(0, i, 0.0) for i in range(100))


def test_normalisation_is_fitted_on_the_training_split_and_batches_replay_exactly(tmp_path: Path) -> None:
    datagen.write_csv_shards(tmp_path, shards=3, rows_per_shard=120)
    corpus = _corpus(tmp_path, world=2)
    counts = corpus.scan(rank=0, device="cpu")  # single process: scanning rank 0 of 2 sees shards 0 and 2 only
    assert sum(counts.train) + sum(counts.val) == 240
    assert corpus.spec is not None and corpus.spec.n_outputs == 2
    assert 40 < corpus.spec.feature_mean[2] < 60 and 10 < corpus.spec.feature_std[2] < 30  # c ~ N(50, 20)
    steps = steps_in_epoch(corpus, counts, seed=3, epoch=0, batch_size=16)
    full = list(train_batches(corpus, 3, 0, 0, 16, window=64, steps=steps))
    tail = list(train_batches(corpus, 3, 0, 0, 16, window=64, steps=steps, skip=2))
    assert len(full) == steps and len(tail) == steps - 2
    assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(full[2:], tail, strict=True))
    other_epoch = list(train_batches(corpus, 3, 1, 0, 16, window=64, steps=1))
    assert not (other_epoch[0][0] == full[0][0]).all()
