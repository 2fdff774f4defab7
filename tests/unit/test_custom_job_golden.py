"""Golden CustomJobs: for each case, `landfall plan REQUEST --custom-job` prints the golden REST body; the body
round-trips through `aiplatform_v1.CustomJob` (the type the dispatcher's client sends) and equals what the dispatcher
builds; the gcloud config.yaml, read back, parses into `aiplatform_v1.CustomJobSpec` with unknown fields refused
(gcloud sends the file as that message and Vertex checks it only on the server); and the trainer takes the container
arguments, splitting the global batch exactly as planned.

Regenerate the goldens with `.venv/bin/python -m tests.unit.custom_job_golden` after a deliberate change.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from google.cloud.aiplatform_v1 import CustomJob, CustomJobSpec
from google.protobuf import json_format

from deploy.images import trainer_image
from functions.dispatch.job_spec import custom_job
from functions.dispatch.planner_config import planner_config
from functions.planning import plan_input_from_request, plan_request
from functions.planning.catalog import load_catalog
from functions.settings import settings_from_env
from landfall.custom_job import gcloud_config, rest_body
from schemas.plan import Plan
from schemas.training_request import parse_training_request
from tests.unit.custom_job_golden import CASES, ENV, NOW, env_for, export, golden_path, request_path
from trainer.config import parse_args


def golden(case: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(golden_path(case).read_text())
    return body


def pools(body: dict[str, Any]) -> list[dict[str, Any]]:
    specs: list[dict[str, Any]] = body["jobSpec"]["workerPoolSpecs"]
    return specs


def args_of(body: dict[str, Any]) -> list[str]:
    args: list[str] = pools(body)[0]["containerSpec"]["args"]
    return args


@pytest.mark.parametrize("case", CASES)
def test_the_cli_prints_the_golden_rest_body(case: str) -> None:
    code, out, err = export(case, "json")
    assert code == 0, err
    assert out == golden_path(case).read_text(), f"regenerate with python -m tests.unit.custom_job_golden ({case})"


@pytest.mark.parametrize("case", CASES)
def test_the_golden_round_trips_through_the_sdk_type_and_is_what_the_dispatcher_builds(case: str) -> None:
    body = golden(case)
    message = json_format.ParseDict(copy.deepcopy(body), CustomJob.pb()(), ignore_unknown_fields=False)
    assert rest_body(CustomJob.to_dict(CustomJob.wrap(message))) == body
    request = parse_training_request(request_path(case).read_text())
    settings = settings_from_env(env_for(case))
    plan = _plan(case)
    built = CustomJob(custom_job(request, plan, settings, request.run_id))
    assert CustomJob.pb(built) == message


def _plan(case: str) -> Plan:
    from datetime import datetime

    request = parse_training_request(request_path(case).read_text())
    settings = settings_from_env(env_for(case))
    plan = plan_request(
        plan_input_from_request(request), planner_config(settings), now=datetime.fromisoformat(NOW)
    ).plan
    assert plan is not None
    return plan


@pytest.mark.parametrize("case", CASES)
def test_the_golden_s_timeout_is_at_least_its_plan_s_p90_plus_one_start_up(case: str) -> None:
    plan = _plan(case)
    timeout = int(golden(case)["jobSpec"]["scheduling"]["timeout"].removesuffix("s"))
    startup = load_catalog().assumptions.job.startup_seconds
    assert plan.p90_hours > plan.estimated_hours
    assert timeout == plan.timeout_seconds
    assert timeout >= plan.p90_hours * 3600 + startup - 1, (
        f"{case}: {timeout} s < p90 {plan.p90_hours:.3f} h + start-up"
    )


@pytest.mark.parametrize("case", CASES)
def test_the_gcloud_config_yaml_reads_back_as_a_custom_job_spec_refusing_unknown_fields(case: str) -> None:
    code, out, err = export(case, "yaml")
    assert code == 0, err
    assert out.startswith("# Vertex AI CustomJobSpec") and "#   gcloud ai custom-jobs create --region=" in out
    spec = yaml.safe_load(out)
    assert set(spec) <= {"workerPoolSpecs", "scheduling", "serviceAccount", "baseOutputDirectory"}
    parsed = json_format.ParseDict(spec, CustomJobSpec.pb()(), ignore_unknown_fields=False)
    expected = json_format.ParseDict(gcloud_config(golden(case)), CustomJobSpec.pb()())
    assert parsed == expected
    spec["workerPoolSpecs"][0]["diskSpec"]["bootDiskKind"] = "pd-ssd"  # a field CustomJobSpec does not have
    with pytest.raises(json_format.ParseError, match="bootDiskKind"):
        json_format.ParseDict(spec, CustomJobSpec.pb()(), ignore_unknown_fields=False)


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("own_")])
def test_the_trainer_takes_the_arguments_and_splits_the_global_batch_exactly(case: str) -> None:
    body = golden(case)
    request = parse_training_request(request_path(case).read_text())
    config = parse_args(args_of(body))
    workers = [p for p in pools(body) if p and "reductionserver" not in p["containerSpec"]["imageUri"]]
    assert all(p["containerSpec"]["args"] == args_of(body) for p in workers)
    processes = sum(p["replicaCount"] * (p["machineSpec"].get("acceleratorCount") or 1) for p in workers)
    split = config.batch_split(processes)
    # under a model-parallel layout the samples split over the data dimension: processes / (tensor x pipeline)
    assert split.processes == processes // (config.tensor_parallel * config.pipeline_parallel)
    data = split.processes
    assert split.micro_batch * data * split.accumulation == config.batch_size == request.hyperparameters.batch_size
    assert body["jobSpec"]["serviceAccount"] == ENV["LANDFALL_TRAINING_SERVICE_ACCOUNT"]
    assert (
        body["jobSpec"]["scheduling"]["restartJobOnWorkerRestart"]
        if len(workers) > 1 or pools(body)[0]["replicaCount"] > 1
        else "restartJobOnWorkerRestart" not in body["jobSpec"]["scheduling"]
    )
    timeout = int(body["jobSpec"]["scheduling"]["timeout"].removesuffix("s"))
    assert 1800 <= timeout <= 7 * 24 * 3600


def test_cpu_only_has_no_accelerator_one_pool_and_the_standard_strategy() -> None:
    body = golden("cpu_only")
    (pool,) = pools(body)
    assert set(pool["machineSpec"]) == {"machineType"} and pool["replicaCount"] == 1
    assert body["jobSpec"]["scheduling"]["strategy"] == "STANDARD"
    assert "--precision=fp32" in args_of(body) and "--micro-batch-size=64" in args_of(body)


def test_one_gpu_and_eight_gpus_on_one_node_are_one_pool() -> None:
    # a3-highgpu-1g is sold as Spot or Flex-start only (consumption.json): without Spot it waits as FLEX_START
    assert golden("one_gpu")["jobSpec"]["scheduling"]["strategy"] == "FLEX_START"
    (one,) = pools(golden("one_gpu"))
    assert one["machineSpec"] == {
        "machineType": "a3-highgpu-1g",
        "acceleratorType": "NVIDIA_H100_80GB",
        "acceleratorCount": 1,
    }
    (eight,) = pools(golden("eight_gpus_one_node"))
    assert (eight["machineSpec"]["acceleratorCount"], eight["replicaCount"]) == (8, 1)


def test_four_nodes_use_the_european_reduction_server_and_the_region_s_artifacts_bucket() -> None:
    body = golden("four_nodes_reduction_server_europe")
    primary, workers, servers = pools(body)
    assert (primary["replicaCount"], workers["replicaCount"]) == (1, 3)
    assert servers["containerSpec"] == {
        "imageUri": "europe-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    }
    assert servers["machineSpec"] == {"machineType": "n1-highcpu-16"} and servers["replicaCount"] >= 1
    assert body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"].startswith(
        "gs://acme-ml-landfall-artifacts-europe-west4/runs/"
    )
    assert "--strategy=ddp" in args_of(body)


def test_two_a3_ultra_nodes_run_70b_tensor_parallel_inside_and_pipeline_stages_across_on_hyperdisk() -> None:
    body = golden("two_nodes_fsdp_a3_ultra")
    primary, workers = pools(body)
    for pool in (primary, workers):
        assert pool["machineSpec"]["machineType"] == "a3-ultragpu-8g"
        assert pool["diskSpec"] == {"bootDiskType": "hyperdisk-balanced", "bootDiskSizeGb": 100}
        assert (env_of(pool)["LANDFALL_TENSOR_PARALLEL"], env_of(pool)["LANDFALL_PIPELINE_PARALLEL"]) == ("4", "2")
    # tensor parallelism splits the activations: they fit without recomputing them
    assert {"--strategy=fsdp", "--tensor-parallel=4", "--pipeline-parallel=2"} <= set(args_of(body))
    assert "--activation-checkpointing" not in args_of(body)
    assert body["jobSpec"]["scheduling"]["restartJobOnWorkerRestart"] is True


def test_a_7b_model_on_eight_l4_recomputes_its_activations_under_fsdp() -> None:
    args = set(args_of(golden("one_node_activation_checkpointing")))
    assert {"--strategy=fsdp", "--activation-checkpointing"} <= args
    assert not any(a.startswith(("--tensor-parallel", "--pipeline-parallel")) for a in args)


def test_spot_and_flex_start_set_their_strategies() -> None:
    assert golden("spot")["jobSpec"]["scheduling"]["strategy"] == "SPOT"
    flex = golden("flex_start")["jobSpec"]["scheduling"]
    assert flex["strategy"] == "FLEX_START" and flex["maxWaitDuration"] == "86400s"
    assert pools(golden("flex_start"))[0]["machineSpec"]["acceleratorType"] == "NVIDIA_A100_80GB"


def test_a_pinned_a3_highgpu_2g_keeps_its_shape_and_accumulates() -> None:
    body = golden("pinned_a3_highgpu_2g")
    (pool,) = pools(body)
    assert pool["machineSpec"] == {
        "machineType": "a3-highgpu-2g",
        "acceleratorType": "NVIDIA_H100_80GB",
        "acceleratorCount": 2,
    }
    assert {"--batch-size=64", "--micro-batch-size=16", "--gradient-accumulation-steps=2"} <= set(args_of(body))


def test_a_reservation_plan_consumes_the_named_reservation_in_every_training_pool() -> None:
    body = golden("reservation")
    training = [p for p in pools(body) if p and "reductionserver" not in p["containerSpec"]["imageUri"]]
    assert sum(p["replicaCount"] for p in training) <= 2  # the reservation holds 2 machines
    for pool in training:
        assert pool["machineSpec"]["machineType"] == "a3-highgpu-8g"
        assert pool["machineSpec"]["reservationAffinity"] == {
            "reservationAffinityType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": ["projects/acme-ml/zones/us-central1-a/reservations/acme-h100s"],
        }
    for pool in pools(body):
        if pool and "reductionserver" in pool["containerSpec"]["imageUri"]:
            assert "reservationAffinity" not in pool["machineSpec"]
    assert body["jobSpec"]["scheduling"]["strategy"] == "STANDARD"
    # the other goldens run without a reservation
    assert all("reservationAffinity" not in p.get("machineSpec", {}) for p in pools(golden("eight_gpus_one_node")))


def env_of(pool: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pool["containerSpec"].get("env", [])}


@pytest.mark.parametrize("case", CASES)
def test_every_form_carries_the_contract_s_plan_variables(case: str) -> None:
    body = golden(case)
    request = parse_training_request(request_path(case).read_text())
    training = [p for p in pools(body) if p and "reductionserver" not in p["containerSpec"]["imageUri"]]
    processes = sum(p["replicaCount"] * (p["machineSpec"].get("acceleratorCount") or 1) for p in training)
    for pool in training:
        env = env_of(pool)
        assert env["LANDFALL_DATA_URI"] == request.dataset.uri and env["LANDFALL_RUN_ID"] == request.run_id
        micro, accumulation = int(env["LANDFALL_MICRO_BATCH_SIZE"]), int(env["LANDFALL_GRADIENT_ACCUMULATION_STEPS"])
        # the mesh: tensor x pipeline x data = the processes; the batch splits over the data dimension
        tensor, pipeline = int(env["LANDFALL_TENSOR_PARALLEL"]), int(env["LANDFALL_PIPELINE_PARALLEL"])
        data = int(env["LANDFALL_DATA_PARALLEL"])
        assert tensor * pipeline * data == processes
        assert micro * accumulation * data == int(env["LANDFALL_GLOBAL_BATCH_SIZE"])
        assert {"LANDFALL_STRATEGY", "LANDFALL_PRECISION"} <= set(env)
        if request.trainer.builtin:
            args = pool["containerSpec"]["args"]
            assert (f"--tensor-parallel={tensor}" in args) == (tensor > 1)
            assert (f"--pipeline-parallel={pipeline}" in args) == (pipeline > 1)
        every = int(env["LANDFALL_CHECKPOINT_EVERY_STEPS"])  # the plan's interval, for every form
        # the same on the clock, unless the request counts in steps
        seconds = 0 if request.hyperparameters.checkpoint_every_steps else int(env["LANDFALL_CHECKPOINT_EVERY_SECONDS"])
        assert every >= 1 and (seconds >= 1 or request.hyperparameters.checkpoint_every_steps == every)
        if request.trainer.builtin:
            config = parse_args(pool["containerSpec"]["args"])
            assert (config.checkpoint_every_seconds, config.checkpoint_every) == (seconds, None if seconds else every)


def test_a_script_runs_under_the_trainer_image_through_the_launcher_with_its_requirements() -> None:
    body = golden("own_script_two_nodes")
    primary, workers = pools(body)[:2]
    assert primary["containerSpec"] == workers["containerSpec"] and workers["replicaCount"] == 1
    spec = primary["containerSpec"]
    assert spec["imageUri"] == ENV["LANDFALL_TRAINER_IMAGE"] and "command" not in spec  # the image's launcher
    assert spec["args"] == ["--lr", "3e-4"]
    env = env_of(primary)
    assert env["LANDFALL_TRAINER_FORM"] == "script" and env["LANDFALL_LAUNCH"] == "per-gpu"
    assert env["LANDFALL_TRAINER_SCRIPT"] == "gs://acme-ml-landfall-code/teams/nlp/train.py"
    assert json.loads(env["LANDFALL_TRAINER_REQUIREMENTS"]) == ["sentencepiece==0.2.0"]
    assert env["WANDB_MODE"] == "offline"


def test_a_package_names_its_wheels_and_module_and_launches_per_node() -> None:
    env = env_of(pools(golden("own_package"))[0])
    assert env["LANDFALL_TRAINER_FORM"] == "package" and env["LANDFALL_LAUNCH"] == "per-node"
    assert env["LANDFALL_TRAINER_MODULE"] == "nlp_trainer.task"
    assert json.loads(env["LANDFALL_TRAINER_PACKAGES"]) == [
        "gs://acme-ml-landfall-code/teams/nlp/trainer-0.3.0-py3-none-any.whl"
    ]


def test_an_image_runs_as_given_with_the_contract_paths_on_the_fuse_mount() -> None:
    (pool,) = pools(golden("own_image"))
    spec = pool["containerSpec"]
    assert spec["imageUri"] == "us-central1-docker.pkg.dev/acme-ml/landfall/team-nlp:2.1"
    assert (spec["command"], spec["args"]) == (["python", "-m", "team.train"], ["--epochs", "2"])
    env = env_of(pool)
    assert env["LANDFALL_DATA_DIR"] == "/gcs/acme-ml-landfall-landing/datasets/web-small/"
    assert env["LANDFALL_MODEL_DIR"].startswith("/gcs/acme-ml-landfall-artifacts-us-central1/runs/")
    assert env["LANDFALL_METRICS_FILE"] == env["LANDFALL_MODEL_DIR"] + "metrics.jsonl"
    # AIP_CHECKPOINT_DIR (base_output_directory's checkpoints/, as Vertex sets it) through the mount
    base = golden("own_image")["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
    assert env["LANDFALL_CHECKPOINT_DIR"] == "/gcs/" + base.removeprefix("gs://") + "checkpoints/"
    assert "LANDFALL_TRAINER_FORM" not in env


def _plan_of(case: str) -> Plan:
    from datetime import datetime

    request = parse_training_request(request_path(case).read_text())
    plan = plan_request(plan_input_from_request(request), now=datetime.fromisoformat(NOW)).plan
    assert plan is not None
    return plan


def test_a_b200_plan_runs_the_image_built_for_cuda_13() -> None:
    (pool,) = pools(golden("b200_one_node"))
    assert pool["machineSpec"]["acceleratorType"] == "NVIDIA_B200"
    image = pool["containerSpec"]["imageUri"]
    assert image == ENV["LANDFALL_TRAINER_IMAGE"].replace("/trainer:", "/trainer-cu130:")
    build = trainer_image().build_named("trainer-cu130")
    assert build.cuda.startswith("13.") and build.supports("10.0")
    assert not trainer_image().builds[0].supports("10.0"), "the CUDA 12.6 build has no sm_100 kernels"


@pytest.mark.parametrize("case", ["four_nodes_reduction_server_europe", "four_nodes_a3_mega"])
def test_a_reduction_server_plan_runs_reducers_on_google_s_image_and_workers_on_an_image_with_the_plugin(
    case: str,
) -> None:
    primary, workers, reducers = pools(golden(case))
    assert reducers["containerSpec"]["imageUri"].endswith(
        "-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    )
    assert reducers["machineSpec"] == {"machineType": "n1-highcpu-16"}
    for pool in (primary, workers):
        name = pool["containerSpec"]["imageUri"].rsplit("/", 1)[1].split(":")[0]
        build = trainer_image().build_named(name)
        assert build.reduction_server, f"{build.name} must carry google-reduction-server"


def test_a_team_image_without_the_plugin_gets_no_reducers() -> None:
    body = golden("own_image_four_nodes")
    assert [p["replicaCount"] for p in pools(body)] == [1, 3], "no Reduction Server pool"
    assert "Reduction Server: not used: " in " ".join(_plan_of("own_image_four_nodes").reasons)


def test_a_multi_node_a3_job_sets_up_no_gpudirect_it_cannot_have_and_its_plan_assumes_the_primary_nic() -> None:
    """A Vertex CustomJob can attach neither the GPU NICs nor the RxDM sidecar GPUDirect-TCPXO needs: the job carries
    no TCPXO plugin settings, and the plan was made at the 200 Gbps the VM's primary NIC gives."""
    body = golden("four_nodes_a3_mega")
    for pool in pools(body)[:2]:
        names = {e["name"] for e in pool["containerSpec"]["env"]}
        assert not {n for n in names if n.startswith(("NCCL_FASTRAK", "NCCL_GPUDIRECTTCPX", "NCCL_NET"))}
    (line,) = [a for a in _plan_of("four_nodes_a3_mega").assumptions if a.startswith("network: ")]
    assert "at 200 Gbps (its primary NIC), not GPUDirect-TCPXO's 1600 Gbps" in line
