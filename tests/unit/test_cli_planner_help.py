"""The planner's commands help, not mislead: estimate-memory says when activations are not counted, and
catalog takes --gpu, --region and --min-gpus filters."""

from __future__ import annotations

import json

import pytest

from functions.planning.catalog import load_catalog
from landfall import cli


def landfall(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


MEMORY = ["estimate-memory", "--params", "1.3B", "--strategy", "fsdp", "--gpus", "8"]


def test_without_a_preset_estimate_memory_says_activations_are_not_counted(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = landfall(MEMORY, capsys)
    assert code == 0
    assert "activations   not counted    -" in out
    assert "activations are not counted: the total is a lower bound. --preset NAME --micro-batch N adds them" in out
    assert "(before activations)" in out
    assert json.loads(landfall([*MEMORY, "--json"], capsys)[1])["activations_counted"] is False


def test_with_a_preset_activations_are_counted_and_no_warning_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = landfall([*MEMORY, "--preset", "gpt-1.3b"], capsys)
    assert code == 0 and "not counted" not in out and "before activations" not in out
    assert json.loads(landfall([*MEMORY, "--preset", "gpt-1.3b", "--json"], capsys)[1])["activations_counted"]


def shapes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict]:
    code, out, _ = landfall(["catalog", *argv, "--json"], capsys)
    assert code == 0
    rows: list[dict] = json.loads(out)
    return rows


def test_catalog_filters_by_gpu_model_or_type_region_and_count(capsys: pytest.CaptureFixture[str]) -> None:
    h100 = shapes(["--gpu", "h100"], capsys)
    assert h100 and {s["accelerator_type"] for s in h100} == {"NVIDIA_H100_80GB", "NVIDIA_H100_MEGA_80GB"}
    assert {s["accelerator_type"] for s in shapes(["--gpu", "NVIDIA_A100_80GB"], capsys)} == {"NVIDIA_A100_80GB"}
    in_region = shapes(["--region", "asia-southeast1"], capsys)
    assert in_region and all("asia-southeast1" in s["regions"] for s in in_region)
    assert len(in_region) < len(load_catalog().shapes)
    eight = shapes(["--gpu", "H100", "--region", "us-central1", "--min-gpus", "8"], capsys)
    assert eight and all(s["accelerator_count"] >= 8 and "us-central1" in s["regions"] for s in eight)
    assert len(eight) < len(h100)


def test_catalog_table_counts_what_the_filters_kept(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = landfall(["catalog", "--gpu", "T4"], capsys)
    kept = len(shapes(["--gpu", "T4"], capsys))
    assert code == 0 and f"{kept} of {len(load_catalog().shapes)} shapes" in out and "NVIDIA_L4" not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu", "X100"], "--gpu 'X100' is not a GPU in the catalog; known: A100, B200, H100"),
        (["--region", "mars-east1"], "--region 'mars-east1' is not a region in the catalog; known: us-central1"),
    ],
)
def test_an_unknown_gpu_or_region_names_the_known_ones(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = landfall(["catalog", *argv], capsys)
    assert code == 2 and message in err and err.count("\n") == 1


def test_no_matching_shape_exits_1_saying_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = landfall(["catalog", "--gpu", "T4", "--min-gpus", "16"], capsys)
    assert code == 1 and out == "" and "no machine shape matches these filters" in err
