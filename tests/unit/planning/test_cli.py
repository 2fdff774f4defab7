"""`landfall plan`, `landfall catalog` and `landfall estimate-memory`, called through their registered parsers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from landfall.commands.planning import register
from tests.unit.planning.golden import NOW

EXAMPLE = Path(__file__).parents[3] / "schemas/examples/training_request.json"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="landfall")
    register(p.add_subparsers(dest="command"))
    return p


def run(argv, capsys):
    args = parser().parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr()


def test_every_command_has_help_text():
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    assert set(helps) == {"plan", "catalog", "estimate-memory"}
    assert all(text and len(text) > 20 for text in helps.values())
    for name, sub_parser in sub.choices.items():
        assert sub_parser.description, name
        assert all(action.help for action in sub_parser._actions if action.dest != "help"), name


def test_catalog_json_prints_one_object_per_shape(capsys):
    from functions.planning.catalog import load_catalog

    code, out = run(["catalog", "--json"], capsys)
    shapes = json.loads(out.out)
    assert code == 0 and len(shapes) == len(load_catalog().shapes)
    required = {
        "machine_type",
        "accelerator_type",
        "accelerator_count",
        "gpu_memory_gb",
        "vcpus",
        "memory_gb",
        "regions",
    }
    assert all(required <= set(s) for s in shapes)
    cpu = next(s for s in shapes if s["machine_type"] == "n1-standard-4" and s["accelerator_count"] == 0)
    assert cpu["accelerator_type"] is None and cpu["gpu_memory_gb"] is None and "us-central1" in cpu["regions"]
    h100 = next(s for s in shapes if s["machine_type"] == "a3-highgpu-8g")
    assert (h100["accelerator_type"], h100["accelerator_count"], h100["gpu_memory_gb"]) == ("NVIDIA_H100_80GB", 8, 80)
    assert h100["sold_as"] == ["flex_start", "on_demand", "reservation", "spot"]
    small = next(s for s in shapes if s["machine_type"] == "a3-highgpu-1g")
    assert small["sold_as"] == ["flex_start", "spot"]  # not on demand (Google's consumption options)


def test_catalog_table(capsys):
    code, out = run(["catalog"], capsys)
    assert code == 0 and "a4-highgpu-8g" in out.out and "NVIDIA_B200" in out.out
    b200 = next(line for line in out.out.splitlines() if line.startswith("a4-highgpu-8g"))
    assert b200.endswith("Spot, Flex-start or a reservation only")


def test_plan_table_marks_the_chosen_row(capsys):
    code, out = run(["plan", str(EXAMPLE), "--now", NOW.isoformat()], capsys)
    lines = out.out.splitlines()
    assert (
        code == 0
        and lines[0]
        == "objective: least cost + $50/h x wall hours (the default value of time) (no deadline, no budget)"
    )
    marked = [line for line in lines if line.startswith("*")]
    assert len(marked) == 1 and "chosen" in marked[0] and "cpu" in marked[0] and "us-central1" in marked[0]
    assert "more candidates (--all lists them)" in out.out
    code, out = run(["plan", str(EXAMPLE), "--all", "--now", NOW.isoformat()], capsys)
    assert "more candidates" not in out.out and out.out.count("\n") > 600


def test_plan_prefer_replans_the_request_under_another_objective(capsys):
    code, out = run(["plan", str(EXAMPLE), "--prefer", "cheapest", "--now", NOW.isoformat()], capsys)
    first = out.out.splitlines()[0]
    assert code == 0 and first == "objective: cheapest plan (prefer: cheapest) (no deadline, no budget)"
    code, out = run(["plan", str(EXAMPLE), "--prefer", "25", "--json", "--now", NOW.isoformat()], capsys)
    assert code == 0 and json.loads(out.out)["objective"].startswith("least cost + $25/h x wall hours (prefer: 25)")
    code, out = run(["plan", str(EXAMPLE), "--prefer", "soon", "--now", NOW.isoformat()], capsys)
    assert code == 2 and "'soon' is not an objective: write cheapest, fastest, or a value of time" in out.err


def test_plan_json_prints_the_plan(capsys):
    code, out = run(["plan", str(EXAMPLE), "--json", "--now", NOW.isoformat()], capsys)
    plan = json.loads(out.out)
    assert code == 0
    assert plan["accelerator_type"] is None and plan["accelerator_count"] == 0 and plan["region"] == "us-central1"
    assert plan["alternatives"] and plan["schema_version"] == 1
    assert plan["estimated_hours"] < plan["p90_hours"] and plan["estimated_cost_usd"] < plan["p90_cost_usd"]
    assert plan["band_basis"]


def test_plan_text_shows_the_p50_p90_band_of_the_chosen_plan(capsys):
    code, out = run(["plan", str(EXAMPLE), "--now", NOW.isoformat()], capsys)
    assert code == 0
    line = next(line for line in out.out.splitlines() if line.startswith("plan: "))
    assert "p50 " in line and "; p90 " in line
    assert any(line.startswith("  - estimate: p50 ") for line in out.out.splitlines())


def test_rejected_request_exits_1_with_the_reason(tmp_path, capsys):
    request = json.loads(EXAMPLE.read_text())
    request.update(task="causal-lm", model={"preset": "gpt-7b"})
    request["constraints"]["max_gpus"] = 1
    request["constraints"]["gpu_allowlist"] = ["NVIDIA_H100_80GB"]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(request))
    code, out = run(["plan", str(path), "--now", NOW.isoformat()], capsys)
    assert code == 1 and "REJECTED: no plan meets the request" in out.out and "GB per GPU under DDP" in out.out
    code, out = run(["plan", str(path), "--json", "--now", NOW.isoformat()], capsys)
    assert code == 1 and "FSDP" in json.loads(out.out)["rejection"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{not json", "is not JSON"),
        ('{"schema_version": 1}', "dataset"),
    ],
)
def test_plan_bad_files_exit_2_with_a_message(tmp_path, capsys, content, message):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    code, out = run(["plan", str(path)], capsys)
    assert code == 2 and message in out.err


def test_plan_prints_why_the_job_looks_as_it_does(capsys):
    code, out = run(["plan", str(EXAMPLE), "--now", NOW.isoformat()], capsys)
    assert code == 0
    assert "  - batch: global 64 = micro-batch 64 x 1 process x 1 accumulation step" in out.out
    assert "  - scheduling: " in out.out and "timeout 30 min" in out.out


def test_custom_job_export_refuses_what_the_dispatcher_would_refuse(tmp_path, capsys):
    request = json.loads(EXAMPLE.read_text())
    request["constraints"]["machine_type"] = "a3-highgpu-3g"
    path = tmp_path / "pinned.json"
    path.write_text(json.dumps(request))
    code, out = run(["plan", str(path), "--custom-job", "--now", NOW.isoformat()], capsys)
    assert code == 1 and "REJECTED: constraints.machine_type: 'a3-highgpu-3g' is not a machine type" in out.out
    request["constraints"].update(machine_type="a3-highgpu-1g", gpu_allowlist=["NVIDIA_L4"])
    path.write_text(json.dumps(request))
    code, out = run(["plan", str(path), "--custom-job", "--format", "json", "--now", NOW.isoformat()], capsys)
    assert code == 1 and out.out == "" and "REJECTED: no plan meets the request" in out.err


def test_plan_json_and_text_show_the_layout_beside_the_strategy(capsys):
    code, out = run(["plan", str(EXAMPLE), "--json", "--now", NOW.isoformat()], capsys)
    plan = json.loads(out.out)
    keys = list(plan)
    assert code == 0 and (plan["tensor_parallel"], plan["pipeline_parallel"]) == (1, 1)  # 1 when unused
    assert keys[keys.index("strategy") + 1 : keys.index("strategy") + 3] == ["tensor_parallel", "pipeline_parallel"]
    layout = Path(__file__).parents[1] / "golden/custom_jobs/tensor_pipeline_four_nodes.request.json"
    code, out = run(["plan", str(layout), "--json", "--now", NOW.isoformat()], capsys)
    plan = json.loads(out.out)
    assert code == 0 and (plan["strategy"], plan["tensor_parallel"], plan["pipeline_parallel"]) == ("fsdp", 8, 4)
    code, out = run(["plan", str(layout), "--now", NOW.isoformat()], capsys)
    assert code == 0 and "fsdp, tensor parallel 8 x 4 pipeline stages" in out.out
    assert "layout: tensor parallel 8 inside each machine x 4 pipeline stages across machines" in out.out
