"""`landfall plan`, `landfall catalog` and `landfall estimate-memory`: the planner from the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from landfall.tables import render_table
from landfall.words import band_text, gpus_text, hours_text, price_text
from schemas.vocabulary import STRATEGIES, STRATEGY_TERMS, describe

if TYPE_CHECKING:
    from functions.operations import CapacityHistory, Catalog, DatasetObjects, MachineShape
    from functions.planning import MeasuredFigures, PlanOutcome
    from functions.settings import Settings
    from schemas.measurement import Measurement
    from schemas.training_request import TrainingRequest

DEFAULT_ROWS = 20


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the planning commands to the `landfall` parser."""
    p = subparsers.add_parser(
        "plan",
        help="plan a TrainingRequest: machine, GPUs, strategy, region, cost; shows every candidate",
        description="Plan a TrainingRequest JSON file the way the dispatcher does and show the candidates, the chosen "
        "one marked with *. Exit status 1 when no plan meets the request.",
    )
    p.add_argument("request", metavar="REQUEST.json", help="a TrainingRequest (see schemas/examples/)")
    p.add_argument("--json", action="store_true", help="print the chosen Plan as JSON (or the rejection)")
    p.add_argument("--all", action="store_true", help=f"list every candidate, not only the best {DEFAULT_ROWS}")
    p.add_argument("--now", metavar="RFC3339", help="plan as if it were this time (deadlines are relative to it)")
    p.add_argument(
        "--custom-job",
        action="store_true",
        help="print the Vertex AI CustomJob the dispatcher would submit for the chosen plan, instead of "
        "the candidates (see --format); for a team's code it also writes the dataset listing the job reads "
        "(LANDFALL_DATA_FILES), as the dispatcher does, so the job runs as printed",
    )
    p.add_argument(
        "--format",
        choices=("yaml", "json"),
        default="yaml",
        help="with --custom-job: yaml is the config.yaml of `gcloud ai custom-jobs create --config` (the "
        "CustomJobSpec, the command line in its header); json is the REST body of customJobs.create "
        "(default yaml)",
    )
    p.add_argument(
        "--project",
        help="with --custom-job: the Google Cloud project to print the job for, as its deployed dispatcher would "
        "submit it: image, output bucket, service account and regions from the settings `landfall deploy "
        "--project P` recorded (.landfall/deploy/projects/P.env.yaml); without it, the local stack's job",
    )
    p.add_argument(
        "--trainer-image",
        help="with --custom-job: the trainer image URI (default $LANDFALL_TRAINER_IMAGE, "
        "else the image's URI in the project's default region)",
    )
    p.add_argument(
        "--service-account",
        help="with --custom-job: the email the job runs as (default "
        "$LANDFALL_TRAINING_SERVICE_ACCOUNT, else Vertex's default identity)",
    )
    p.add_argument(
        "--memory-margin",
        type=float,
        metavar="FRACTION",
        help="share of each GPU's memory a plan keeps free (default $LANDFALL_MEMORY_MARGIN, else 0.1)",
    )
    p.add_argument(
        "--timeout-margin",
        type=float,
        metavar="FACTOR",
        help="scheduling.timeout = (the p90 duration + one start-up) x this (default $LANDFALL_TIMEOUT_MARGIN, else 1)",
    )
    p.add_argument(
        "--prefer",
        metavar="OBJECTIVE",
        help="plan as if the request said constraints.prefer: cheapest, fastest, or a value of time in dollars per "
        "hour (e.g. 25); the default is the request's (docs/planning.md: how the objective is chosen)",
    )
    p.add_argument(
        "--measured",
        choices=("auto", "on", "off"),
        default="auto",
        help="plan from what past runs and canaries of the request's workload measured, as the dispatcher does, and "
        "report how far past estimates were from actual durations: auto reads them from the local stack's Firestore "
        "when it answers, on from the Firestore of $GOOGLE_CLOUD_PROJECT, off plans from the model alone "
        "(default auto)",
    )
    p.set_defaults(func=cmd_plan)

    c = subparsers.add_parser(
        "catalog",
        help="list the machine shapes the planner knows (filter by GPU, region)",
        description="Every Vertex AI machine shape in the planner's catalog, one per row, "
        "with its on-demand price in the base region; the filters combine. Exit "
        "status 1 when no shape matches.",
    )
    c.add_argument(
        "--gpu",
        metavar="GPU",
        help="only shapes with this GPU: a model (H100, A100, T4 ...) or a "
        "Vertex accelerator type (NVIDIA_H100_80GB); any case",
    )
    c.add_argument("--region", metavar="REGION", help="only shapes offered in this region (e.g. us-central1)")
    c.add_argument("--min-gpus", type=int, default=0, metavar="N", help="only shapes with at least N GPUs per machine")
    c.add_argument("--json", action="store_true", help="print one JSON object per shape, as a list")
    c.set_defaults(func=cmd_catalog)

    m = subparsers.add_parser(
        "estimate-memory",
        help="memory per GPU for a model size, strategy and GPU count",
        description="Model states (params + grads + Adam) per GPU under DDP, ZeRO-1, ZeRO-2 (FSDP SHARD_GRAD_OP) or "
        "FSDP FULL_SHARD, following the ZeRO paper; with --preset also activations for --micro-batch "
        "samples. GB = 1e9 bytes.",
    )
    m.add_argument("--params", required=True, metavar="P", help="parameter count: 124M, 1.3B, 7e9 ...")
    m.add_argument("--strategy", required=True, choices=STRATEGIES, help=describe(STRATEGY_TERMS))
    m.add_argument("--gpus", required=True, type=int, metavar="N", help="data-parallel degree (GPUs in all)")
    m.add_argument(
        "--precision",
        choices=("mixed", "fp32"),
        default="mixed",
        help="mixed: 16-bit compute with fp32 master weights (default); fp32: everything in fp32",
    )
    m.add_argument(
        "--preset",
        help="model preset whose activations to add (e.g. gpt-1.3b); without it activations "
        "are not counted. Its parameter count is replaced by --params",
    )
    m.add_argument("--micro-batch", type=int, default=1, help="samples per GPU per step, with --preset (default 1)")
    m.add_argument("--json", action="store_true", help="print the estimate as JSON")
    m.set_defaults(func=cmd_estimate_memory)


def _fail(message: str) -> int:
    print(f"landfall: {message}", file=sys.stderr)
    return 2


def read_request(path: str) -> TrainingRequest:
    """The TrainingRequest in a JSON file (parsed by the lead's schema)."""
    from schemas.training_request import parse_training_request

    return parse_training_request(Path(path).read_text())


DEPLOYED_SETTINGS = (
    "LANDFALL_TRAINER_IMAGE",
    "LANDFALL_TRAINING_SERVICE_ACCOUNT",
    "LANDFALL_OUTPUT_BUCKET",
    "LANDFALL_ARTIFACT_BUCKETS",
    "LANDFALL_DEFAULT_REGION",
)
"""What a job in a project takes from its deployed dispatcher's settings, beyond the project itself."""


def deployed_env(project: str) -> dict[str, str]:
    """The dispatcher's environment as `landfall deploy --project project` recorded it in this checkout; a
    SettingsError naming the file and the settings when there is none."""
    from deploy.gcp.bundles import REPO_ROOT, recorded_settings, settings_file
    from functions.settings import SettingsError

    recorded = recorded_settings(project)
    missing = [name for name in DEPLOYED_SETTINGS if not (recorded or {}).get(name)]
    if recorded is None or missing:
        where = settings_file(project).relative_to(REPO_ROOT)
        found = "has no" if recorded is None else f"lacks {', '.join(missing)} in"
        raise SettingsError(
            f"this checkout {found} the settings `landfall deploy --project {project}` records ({where}): "
            f"{', '.join(DEPLOYED_SETTINGS)}. Run `landfall deploy --project {project} --region REGION` (or the "
            "same with --dry-run, which deploys nothing) with the region and --job-region flags the project was "
            "deployed with, then plan again"
        )
    return recorded


def dispatcher_settings(args: argparse.Namespace) -> Settings:
    """The settings the dispatcher would have: with --custom-job --project, those the project's deployed dispatcher
    has (recorded by `landfall deploy`); otherwise the environment (the local stack's when one runs). The flags'
    trainer image and service account go over either."""
    from deploy.topology import load_topology
    from functions.settings import settings_from_env

    env = dict(os.environ)
    if getattr(args, "custom_job", False) and getattr(args, "project", None):
        env.update(deployed_env(args.project))
    env.setdefault("GOOGLE_CLOUD_PROJECT", load_topology().project_id)
    for flag, name in (
        ("project", "GOOGLE_CLOUD_PROJECT"),
        ("trainer_image", "LANDFALL_TRAINER_IMAGE"),
        ("service_account", "LANDFALL_TRAINING_SERVICE_ACCOUNT"),
    ):
        if getattr(args, flag, None):
            env[name] = getattr(args, flag)
    return settings_from_env(env)


def cmd_plan(args: argparse.Namespace) -> int:
    from functions.operations import load_catalog, pinned_shape_problems, planner_config, trainer_problems
    from functions.planning import CatalogError, PlanInputError, plan_input_from_request, plan_request
    from functions.settings import SettingsError
    from schemas.errors import SchemaError
    from schemas.trainer_flags import extra_problems
    from schemas.vocabulary import parse_prefer

    try:
        request = read_request(args.request)
        if args.prefer is not None:  # what-if: the same request under another objective
            parse_prefer(args.prefer)
            request = replace(request, constraints=replace(request.constraints, prefer=args.prefer.strip()))
        now = datetime.fromisoformat(args.now).astimezone(UTC) if args.now else None
        settings = dispatcher_settings(args)
        config = planner_config(settings, memory_margin=args.memory_margin, timeout_margin=args.timeout_margin)
        refused = (
            extra_problems(request.hyperparameters.extra)
            if request.trainer.builtin
            else trainer_problems(request, settings)
        ) + pinned_shape_problems(request)
        measurements = [] if refused else _measurements(request, args.measured, settings)
        if not refused and _reads_firestore(args.measured):
            config = replace(config, capacity=_capacity(settings))
        outcome = (
            None
            if refused
            else plan_request(
                plan_input_from_request(request), config, now=now, measured=_figures(request, measurements)
            )
        )
    except OSError as exc:
        return _fail(f"cannot read {args.request}: {exc.strerror or exc}")
    except (SchemaError, PlanInputError, CatalogError, SettingsError, ValueError) as exc:
        return _fail(f"{args.request}: {exc}")
    if outcome is None:
        # The dispatcher refuses these before planning (request_rules): so does plan, before any machine is paid for.
        rejection = "; ".join(refused)
        print(json.dumps({"rejection": rejection}, indent=2) if args.json else f"REJECTED: {rejection}")
        return 1
    if args.custom_job:
        return _print_custom_job(request, outcome, settings, args.format, deployed=bool(args.project))
    if args.json:
        if outcome.plan is not None:
            print(json.dumps(outcome.plan.to_dict(), indent=2))
        else:
            print(json.dumps({"rejection": outcome.rejection, "objective": outcome.objective}, indent=2))
        return 0 if outcome.plan is not None else 1
    from schemas.plan import layout_text

    gpus = load_catalog().gpus
    rows = outcome.candidates if args.all else outcome.candidates[:DEFAULT_ROWS]
    table = [
        [
            "*" if row.chosen else "",
            str(i),
            row.machine_type,
            gpus_text(row.accelerator_type, row.accelerator_count, row.replica_count, gpus),
            row.replica_count,
            layout_text(row.strategy, row.tensor_parallel, row.pipeline_parallel),
            row.precision,
            row.region or "-",
            row.bought,
            hours_text(row.estimated_hours),
            hours_text(row.p90_hours),
            price_text(row.estimated_cost_usd),
            rate_text(row.samples_per_second_per_gpu),
            "-" if row.mfu is None else f"{row.mfu:.1%}",
            row.figures_from,
            f"{row.memory_total_bytes / 1e9:,.1f}",
            row.reason,
        ]
        for i, row in enumerate(rows, start=1)
    ]
    print(f"objective: {outcome.objective}")
    print(
        render_table(
            [
                "",
                "#",
                "MACHINE",
                "GPUS",
                "NODES",
                "STRATEGY",
                "PREC",
                "REGION",
                "PRICING",
                "HOURS",
                "P90 H",
                "COST",
                "SAMPLES/S/GPU",
                "MFU",
                "FIGURES FROM",
                "GB/GPU",
                "WHY",
            ],
            table,
        )
    )
    hidden = len(outcome.candidates) - len(rows)
    if hidden:
        print(f"... {hidden} more candidates (--all lists them)")
    if outcome.plan is None:
        print(f"\nREJECTED: {outcome.rejection}")
        return 1
    plan = outcome.plan
    server = (
        f", Reduction Server {plan.reduction_server_replicas}x {plan.reduction_server_machine_type}"
        if plan.reduction_server_replicas
        else ""
    )
    print(
        f"\nplan: {plan.machine_type} x{plan.replica_count} "
        f"({gpus_text(plan.accelerator_type, plan.accelerator_count, plan.replica_count, gpus)}), {plan.layout}, "
        f"{plan.precision}, {plan.region}, {plan.scheduling_strategy}{' on a reservation' if plan.reservation else ''}"
        f"{server}: "
        f"{band_text(plan)} "
        f"({price_text(plan.hourly_cost_usd)}/h{', prices estimated' if plan.prices_estimated else ''})"
    )
    if plan.mfu is not None:
        per_gpu = (
            f"{rate_text(plan.samples_per_second_per_gpu)} samples/s per GPU, "
            if plan.samples_per_second_per_gpu is not None
            else ""
        )
        print(f"  the time model: {per_gpu}MFU {plan.mfu:.1%}, step time from {plan.figures_from}")
    for reason in plan.reasons:
        print(f"  - {reason}")
    figures = [a for a in plan.assumptions if a.startswith(("measured", "modelled"))]
    if figures:
        print("figures:")
        for line in figures:
            print(f"  - {line}")
    past = _estimate_summary(measurements)
    if past:
        print("past estimates for this workload:")
        for line in past:
            print(f"  {line}")
    return 0


def rate_text(rate: float | None) -> str:
    """Samples per second per GPU in a table cell; "-" on a CPU-only machine (no GPU)."""
    if rate is None:
        return "-"
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def _reads_firestore(mode: str) -> bool:
    """Whether --measured reads Firestore: on; auto when the local stack's answers; never off."""
    if mode == "off":
        return False
    if mode == "auto":
        from landfall.reach import host_port, port_answers

        where = host_port(os.environ.get("FIRESTORE_EMULATOR_HOST", ""))
        return where is not None and port_answers(*where)
    return True


def _capacity(settings: Settings) -> CapacityHistory:
    """What capacity recent jobs met (schemas/capacity_event.py), as the dispatcher plans with it; the priors when
    Firestore does not answer."""
    from functions.errors import TransientError
    from functions.operations import NO_HISTORY
    from landfall.queries.measurements import recent_capacity

    try:
        return recent_capacity(settings)
    except TransientError as exc:
        print(f"capacity history not read ({exc}): Spot and refusals priced on the priors", file=sys.stderr)
        return NO_HISTORY


def _measurements(request: TrainingRequest, mode: str, settings: Settings) -> list[Measurement]:
    """The workload's measurements (schemas/measurement.py) as the dispatcher reads them; [] with mode off, or with
    auto when no local Firestore answers."""
    if not _reads_firestore(mode):
        return []
    from functions.errors import TransientError
    from landfall.queries.measurements import workload_measurements

    try:
        return workload_measurements(request, settings)
    except TransientError as exc:
        print(f"measurements not read ({exc}): planned from the model alone", file=sys.stderr)
        return []


def _figures(request: TrainingRequest, measurements: list[Measurement]) -> list[MeasuredFigures]:
    from functions.operations import planner_figures
    from schemas.measurement import image_of

    return planner_figures(measurements, image_of(request))


def _estimate_summary(measurements: list[Measurement]) -> list[str]:
    from functions.operations import estimate_summary

    return estimate_summary(measurements)


def _print_custom_job(
    request: TrainingRequest, outcome: PlanOutcome, settings: Settings, fmt: str, deployed: bool = False
) -> int:
    """The CustomJob for the chosen plan (REJECTED and exit 1 when there is none; nothing is submitted; for a team's
    code the dataset listing it reads is written first, _write_listing). deployed: the settings are a project's
    deployed dispatcher's, and the gcloud line names the project."""
    from functions.operations import custom_job
    from landfall.custom_job import render, rest_body

    if outcome.plan is None:
        print(f"REJECTED: {outcome.rejection}", file=sys.stderr)
        return 1
    body = rest_body(custom_job(request, outcome.plan, settings, request.run_id))
    if not request.trainer.builtin:
        failed = _write_listing(request, settings, deployed)
        if failed is not None:
            return failed
    project = settings.project if deployed else None
    sys.stdout.write(render(body, outcome.plan.region, fmt, project=project))
    return 0


def dataset_objects() -> DatasetObjects:
    """Cloud Storage as the dispatcher's dataset check reads and writes it: the local stack's emulator where
    STORAGE_EMULATOR_HOST is set, else Google Cloud with this machine's credentials."""
    from functions.wiring import gcs_objects

    return gcs_objects()


def _write_listing(request: TrainingRequest, settings: Settings, deployed: bool = False) -> int | None:
    """A team's code reads the dataset version's listing that its LANDFALL_DATA_FILES names, which the dispatcher
    writes before it creates the job: write it here through the dispatcher's own check (the same objects, the same
    buckets), so that the printed job runs as printed. None when written (said on stderr); else the exit status,
    with what went wrong and what to do on stderr (1: the dispatcher would refuse the dataset; 2: it cannot be
    written from here), and no job printed."""
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError

    from functions.errors import LandfallError
    from functions.operations import check_dataset, listing_uris

    where = listing_uris(settings, request.run_id)
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if deployed and emulator:
        print(
            f"landfall: the dataset listing the job's LANDFALL_DATA_FILES names ({', '.join(where)}) would go to the "
            f"local stack's Storage emulator (STORAGE_EMULATOR_HOST={emulator}), not to project {settings.project}'s "
            "buckets, and the printed job would fail at start: unset STORAGE_EMULATOR_HOST (a shell without "
            ".landfall/env) and plan again",
            file=sys.stderr,
        )
        return 2
    try:
        refusal = check_dataset(request, dataset_objects(), settings)
    except (LandfallError, GoogleAPIError, GoogleAuthError, OSError) as exc:
        print(
            f"landfall: cannot write the dataset listing that the job's LANDFALL_DATA_FILES names "
            f"({', '.join(where)}): {' '.join(str(exc).split())[:500]}. A team's code reads it at start, so no job "
            f"is printed without it. Check that this machine can list {request.dataset.uri} and write to those "
            "buckets (`gcloud auth application-default login` for a project; `landfall up` and `source "
            ".landfall/env` for the local stack), then plan again",
            file=sys.stderr,
        )
        return 2
    if refusal is not None:
        print(f"REJECTED: {refusal.reason}", file=sys.stderr)
        return 1
    print(f"wrote the dataset listing the job's LANDFALL_DATA_FILES names: {', '.join(where)}", file=sys.stderr)
    return None


def select_shapes(catalog: Catalog, gpu: str | None, region: str | None, min_gpus: int) -> list[MachineShape]:
    """The catalog's shapes that pass the filters; a GPU or region the catalog does not know is a ValueError
    naming the known ones."""
    if gpu is not None:
        wanted = gpu.strip().upper()
        kinds = {k for k, spec in catalog.gpus.items() if wanted in (k.upper(), spec.model.upper())}
        if not kinds:
            known = sorted({spec.model for spec in catalog.gpus.values()})
            raise ValueError(
                f"--gpu {gpu!r} is not a GPU in the catalog; known: {', '.join(known)} (or an "
                "accelerator type such as NVIDIA_H100_80GB)"
            )
    if region is not None and region not in catalog.regions:
        raise ValueError(f"--region {region!r} is not a region in the catalog; known: {', '.join(catalog.regions)}")
    if min_gpus < 0:
        raise ValueError(f"--min-gpus must be >= 0, got {min_gpus}")
    return [
        shape
        for shape in catalog.shapes
        if (gpu is None or shape.accelerator_type in kinds)
        and (region is None or region in shape.regions)
        and shape.accelerator_count >= min_gpus
    ]


def cmd_catalog(args: argparse.Namespace) -> int:
    from functions.operations import load_catalog

    catalog = load_catalog()
    try:
        selected = select_shapes(catalog, args.gpu, args.region, args.min_gpus)
    except ValueError as exc:
        return _fail(str(exc))
    shapes = [
        {**shape.to_json(catalog.gpus), "sold_as": sorted(catalog.consumption.rule(shape.machine_type).modes)}
        for shape in selected
    ]
    if args.json:
        print(json.dumps(shapes, indent=2))
        return 0 if shapes else 1
    if not shapes:
        print("no machine shape matches these filters (`landfall catalog` lists them all)", file=sys.stderr)
        return 1
    book = catalog.prices
    rows = []
    for shape, item in zip(selected, shapes, strict=True):
        hourly = book.quote(shape.machine_type, book.base_region, False).usd_per_hour
        if shape.accelerator_type:
            hourly += shape.accelerator_count * book.quote(shape.accelerator_type, book.base_region, False).usd_per_hour
        rows.append(
            [
                item["machine_type"],
                item["accelerator_type"] or "-",
                item["accelerator_count"],
                item["gpu_memory_gb"] or "-",
                item["vcpus"],
                f"{item['memory_gb']:g}",
                price_text(hourly),
                len(item["regions"]),
                catalog.consumption.rule(shape.machine_type).describe(),
            ]
        )
    print(
        render_table(
            [
                "MACHINE",
                "ACCELERATOR",
                "COUNT",
                "GPU GB",
                "VCPUS",
                "RAM GB",
                f"PER HOUR ({book.base_region})",
                "REGIONS",
                "SOLD (data/consumption.json)",
            ],
            rows,
        )
    )
    print(
        f"{len(rows)} of {len(catalog.shapes)} shapes; prices marked estimate in functions/planning/data/prices.json "
        "until refreshed"
    )
    return 0


def cmd_estimate_memory(args: argparse.Namespace) -> int:
    from functions.operations import breakdown, build_workload, load_catalog
    from functions.planning import PlanInput, PlanInputError, parse_count
    from schemas.errors import SchemaError
    from schemas.model_presets import GptPreset, get_preset

    catalog = load_catalog()
    a = catalog.assumptions.memory
    try:
        parameters = parse_count(args.params)
        if args.gpus < 1:
            raise PlanInputError(f"--gpus must be >= 1, got {args.gpus}")
        if args.micro_batch < 1:
            raise PlanInputError(f"--micro-batch must be >= 1, got {args.micro_batch}")
        per_sample, largest = 0.0, 0
        if args.preset:
            task = "causal-lm" if isinstance(get_preset(args.preset), GptPreset) else "tabular-classification"
            work = build_workload(
                PlanInput(task=task, preset=args.preset, parameters=parameters, dataset_bytes=1), catalog.assumptions
            )
            per_sample, largest = work.activation_bytes_per_sample, work.largest_layer_parameters
    except (PlanInputError, SchemaError) as exc:
        return _fail(str(exc))
    result = breakdown(
        parameters,
        args.strategy,
        args.gpus,
        args.precision == "fp32",
        activation_per_sample=per_sample,
        micro_batch=args.micro_batch if args.preset else 0,
        largest_layer_parameters=largest,
        context_bytes=a.cuda_context_bytes,
        margin=a.safety_margin_fraction,
    )
    usable = 1.0 - a.safety_margin_fraction  # the share of each card a plan may fill
    fits = sorted(
        (g.accelerator_type for g in catalog.gpus.values() if result.total_bytes <= g.memory_bytes * usable),
        key=lambda k: catalog.gpus[k].memory_gb,
    )
    data = {
        "parameters": parameters,
        "strategy": args.strategy,
        "gpus": args.gpus,
        "precision": args.precision,
        "model_states_bytes_per_gpu": result.model_states_bytes,
        "activations_bytes_per_gpu": result.activations_bytes,
        "overhead_bytes_per_gpu": result.overhead_bytes,
        "total_bytes_per_gpu": result.total_bytes,
        "model_state_bytes_per_parameter": result.model_states_bytes / parameters,
        "fits_on": fits,
    }
    data["activations_counted"] = bool(args.preset)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    rows = [
        [name, f"{data[key]:,}", f"{data[key] / 1e9:,.2f}"]
        for name, key in (
            ("model states", "model_states_bytes_per_gpu"),
            ("activations", "activations_bytes_per_gpu"),
            ("overhead", "overhead_bytes_per_gpu"),
            ("total", "total_bytes_per_gpu"),
        )
    ]
    if not args.preset:
        rows[1][1:] = ["not counted", "-"]
    print(render_table(["", "BYTES PER GPU", "GB"], rows))
    if not args.preset:
        print(
            f"activations are not counted: the total is a lower bound. --preset NAME --micro-batch N adds them "
            f"for a model's shape (presets: {', '.join(_gpt_presets())})"
        )
    print(
        f"fits on: {', '.join(fits) if fits else 'no single GPU in the catalog'}"
        + ("" if args.preset else " (before activations)")
    )
    return 0


def _gpt_presets() -> list[str]:
    from schemas.model_presets import GptPreset, load_presets

    return [name for name, preset in load_presets().items() if isinstance(preset, GptPreset)]
