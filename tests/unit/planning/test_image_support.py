"""No plan chooses a GPU its image has no kernels for, and reducers only where the image has the plugin.

Held over the whole catalog: every model preset on every GPU kind (and free of any allowlist, on demand and Spot),
the planner's golden decision requests (tests/unit/planning/decisions.py), the Plan examples' requests and every
request of the CustomJob goldens; each run with Landfall's images and again as a team's container image that carries
only some GPUs (declared, or assumed from the CUDA version its reference names).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from deploy.images import trainer_image
from functions.dispatch.job_spec import image_build
from functions.planning import PlanInput, PlanInputError, plan_input_from_request, plan_request
from functions.planning.catalog import load_catalog
from functions.planning.images import image_support
from schemas.gpus import load_gpus
from schemas.model_presets import load_presets
from schemas.plan import Plan
from schemas.training_request import parse_training_request
from tests.unit.custom_job_golden import CASES, request_path
from tests.unit.planning import decisions, golden

NOW = decisions.NOW
TEAM_IMAGES = (
    ("us-central1-docker.pkg.dev/acme/landfall/team:1-cuda12.4", ()),  # assumed: CUDA 12's set, no sm_100
    ("us-central1-docker.pkg.dev/acme/landfall/team:1", ("8.0", "9.0")),  # declared: A100, L4 (8.9), H100, H200
)


def catalog_requests() -> Iterator[PlanInput]:
    gpus = (*load_catalog().gpus, "")
    for name in load_presets():
        task = "causal-lm" if name.startswith("gpt") else "tabular-classification"
        for gpu in gpus:
            for spot in ("never", "allowed"):
                yield PlanInput(
                    task=task,
                    preset=name,
                    dataset_bytes=10**9,
                    gpu_allowlist=(gpu,) if gpu else (),
                    spot=spot,
                )
    yield from decisions.generated_requests()
    yield from golden.REQUESTS.values()
    for case in CASES:
        yield plan_input_from_request(parse_training_request(request_path(case).read_text()))


def plans(inp: PlanInput) -> list[Plan]:
    try:
        outcome = plan_request(inp, now=NOW)
    except PlanInputError:
        return []
    return [outcome.plan, *outcome.fallbacks] if outcome.plan else []


def capability(plan: Plan) -> str:
    assert plan.accelerator_type
    return load_gpus().kinds[plan.accelerator_type].compute_capability


REQUESTS = list(catalog_requests())


def test_the_catalog_requests_cover_every_gpu_kind_and_multi_node_plans() -> None:
    chosen = [p for inp in REQUESTS if not inp.image_uri for p in plans(inp)[:1]]
    assert {p.accelerator_type for p in chosen} >= set(load_catalog().gpus) - {"NVIDIA_TESLA_P100"}
    assert any(p.replica_count > 1 for p in chosen) and any(p.reduction_server_replicas for p in chosen)


def test_every_plan_on_landfalls_images_runs_on_a_build_with_kernels_for_its_gpu() -> None:
    image = trainer_image()
    for inp in REQUESTS:
        if inp.image_uri:
            continue
        for plan in plans(inp):
            if not plan.accelerator_type:
                continue
            build = image.build_named(image_build(plan))
            assert build.supports(capability(plan)), (inp, plan.accelerator_type, build)
            if plan.reduction_server_replicas:
                assert build.reduction_server, "reducers need the plugin in the image the workers run"


@pytest.mark.parametrize(("image_uri", "declared"), TEAM_IMAGES)
def test_a_team_image_gets_only_gpus_it_carries_kernels_for_and_never_reducers(
    image_uri: str, declared: tuple[str, ...]
) -> None:
    support = image_support(image_uri, declared)
    gpus_seen = set()
    for inp in REQUESTS:
        for plan in plans(dataclasses.replace(inp, image_uri=image_uri, gpu_capabilities=declared)):
            assert plan.reduction_server_replicas == 0, "a team's image is not known to carry the plugin"
            if plan.accelerator_type:
                gpus_seen.add(plan.accelerator_type)
                assert support.supports(capability(plan)), (inp, plan.accelerator_type)
    assert "NVIDIA_B200" not in gpus_seen and gpus_seen, "the image has no sm_100 kernels"


def test_the_image_filter_changes_the_decision_and_the_plan_says_why() -> None:
    inp = PlanInput(task="causal-lm", preset="gpt-7b", dataset_bytes=10**10, gpu_allowlist=("NVIDIA_B200",))
    ours = plan_request(inp, now=NOW).plan
    assert ours is not None and ours.accelerator_type == "NVIDIA_B200"
    assert any(
        a.startswith("image: trainer-cu130 (CUDA 13.0), the build with kernels for sm_100") for a in ours.reasons
    )
    team = dataclasses.replace(inp, image_uri=TEAM_IMAGES[0][0])
    outcome = plan_request(team, now=NOW)
    assert outcome.plan is None and outcome.rejection
    assert f"{TEAM_IMAGES[0][0]} has no kernels for sm_100 (NVIDIA_B200)" in outcome.rejection
    assert "an image with kernels for sm_100" in outcome.rejection, "the fix is named"
    free = plan_request(dataclasses.replace(team, gpu_allowlist=()), now=NOW).plan
    assert free is not None and free.accelerator_type != "NVIDIA_B200"
    (line,) = [a for a in free.reasons if a.startswith("image: ")]
    assert "names CUDA 12: assumed to carry" in line and "not planned on B200 (sm_100)" in line


def test_reducers_are_chosen_only_where_they_shorten_the_step_and_the_plan_says_so() -> None:
    base = PlanInput(
        task="causal-lm",
        preset="gpt-1.3b",
        dataset_bytes=5 * 10**10,
        batch_size=256,
        machine_type="a3-highgpu-8g",
        spot="never",
        regions=("us-central1",),
        prefer="fastest",  # the reducers shorten the step by 3 %: worth it to the fastest plan, not at $50/h
    )
    four = plan_request(dataclasses.replace(base, replica_count=4), now=NOW).plan
    assert four is not None and four.reduction_server_replicas == 25  # 4 x 200 Gbps / ~32 Gbps each
    (line,) = [a for a in four.reasons if a.startswith("Reduction Server: 25 x")]
    assert "step" in line and "->" in line
    two = plan_request(dataclasses.replace(base, replica_count=2), now=NOW).plan
    assert two is not None and two.reduction_server_replicas == 0
    assert "Reduction Server: not used: with 2 machines a ring all-reduce already sends each gradient once" in (
        two.reasons
    )


def test_multi_node_gpudirect_shapes_are_planned_at_the_bandwidth_a_custom_job_gets() -> None:
    catalog = load_catalog()
    for machine, stack in (
        ("a3-highgpu-8g", "GPUDirect-TCPX"),
        ("a3-megagpu-8g", "GPUDirect-TCPXO"),
        ("a3-ultragpu-8g", "GPUDirect-RDMA"),
        ("a4-highgpu-8g", "GPUDirect-RDMA"),
    ):
        (shape,) = [s for s in catalog.shapes if s.machine_type == machine]
        assert shape.network_gbps == 200 and stack in shape.network_note
        inp = PlanInput(
            task="causal-lm", preset="gpt-1.3b", dataset_bytes=10**10, machine_type=machine, replica_count=2
        )
        plan = plan_request(inp, now=NOW).plan
        assert plan is not None and shape.network_note in plan.assumptions
        one = plan_request(dataclasses.replace(inp, replica_count=1), now=NOW).plan
        assert one is not None and not any(a.startswith("network: ") for a in one.assumptions), "NVLink only"
