"""Refuse a CustomJob the way Vertex refuses it at CreateCustomJob (INVALID_ARGUMENT).

Vertex lists every problem in one message of the form
`List of found errors:\t1.Field: <path>; Message: <text>\t2.Field: ...\t`; the emulator does the same, with
Vertex's wording where it is known (vertex.md) and a plain explanation elsewhere. Machine shapes come from
machines.json (catalog.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.cloud.aiplatform_v1.types import CustomJob, WorkerPoolSpec

from deploy.vertex_emulator.catalog import MachineCatalog, load_catalog
from deploy.vertex_emulator.faults import unsupported_message
from deploy.vertex_emulator.launch import is_empty_pool, is_reduction_server
from deploy.vertex_emulator.wellknown import duration_of

MAX_DISPLAY_NAME = 128
MAX_LABELS = 64
MAX_LABEL_LENGTH = 64
MAX_ENV_VARS = 100
MAX_FLEX_TIMEOUT_SECONDS = 7 * 24 * 3600
BOTH_OR_NONE = "Both `accelerator_type` and `accelerator_count` should be specified or none."


@dataclass(frozen=True)
class FieldError:
    """One problem: the field's path inside the CustomJob and what is wrong with it."""

    field: str
    message: str


def format_errors(errors: list[FieldError]) -> str:
    """Vertex's INVALID_ARGUMENT message listing every problem."""
    items = "".join(f"{i}.Field: {e.field}; Message: {e.message}\t" for i, e in enumerate(errors, 1))
    return f"List of found errors:\t{items}"


def _label_text_ok(text: str) -> bool:
    return all((c.isalpha() and c == c.lower()) or c.isdigit() or c in "_-" for c in text)


def check_labels(labels: dict[str, str]) -> list[FieldError]:
    """Vertex's label rules: at most 64 labels; keys and values at most 64 characters of lowercase letters
    (international letters allowed), digits, `_` and `-`; keys start with a letter."""
    errors = []
    if len(labels) > MAX_LABELS:
        errors.append(FieldError("labels", f"At most {MAX_LABELS} labels are allowed, found {len(labels)}."))
    for key, value in labels.items():
        if not key or len(key) > MAX_LABEL_LENGTH or not _label_text_ok(key) or not key[0].isalpha():
            errors.append(
                FieldError(
                    f"labels[{key!r}]",
                    f'Invalid label key "{key}": keys must be 1 to {MAX_LABEL_LENGTH} characters, '
                    "start with a lowercase letter and contain only lowercase letters, digits, underscores and dashes.",
                )
            )
        if len(value) > MAX_LABEL_LENGTH or not _label_text_ok(value):
            errors.append(
                FieldError(
                    f"labels[{key!r}]",
                    f'Invalid label value "{value}": values must be at most {MAX_LABEL_LENGTH} characters of lowercase '
                    "letters, digits, underscores and dashes.",
                )
            )
    return errors


def check_machine(path: str, spec: WorkerPoolSpec, catalog: MachineCatalog) -> list[FieldError]:
    """Machine type known, accelerator given in full, and a count the machine type accepts."""
    machine = spec.machine_spec
    kind = machine.accelerator_type.name if machine.accelerator_type else ""
    count = machine.accelerator_count
    if not catalog.is_known(machine.machine_type):
        return [FieldError(f"{path}.machine_spec.machine_type", unsupported_message(machine.machine_type))]
    if bool(kind) != (count > 0):
        return [FieldError(f"{path}.machine_spec.accelerator_type", BOTH_OR_NONE)]
    field = f"{path}.machine_spec.accelerator_count"
    if machine.machine_type in catalog.gpu_machines:
        wanted_kind, wanted_count = catalog.gpu_machines[machine.machine_type]
        if kind != wanted_kind or count != wanted_count:
            return [
                FieldError(
                    field,
                    (
                        f'Machine type "{machine.machine_type}" comes with {wanted_count} x {wanted_kind}; found '
                        f'{count} x {kind or "no accelerator"}. Set accelerator_type="{wanted_kind}" and '
                        f"accelerator_count={wanted_count}, or choose another machine type."
                    ),
                )
            ]
        return []
    if not kind:
        return []
    shape = catalog.n1_shape(machine.machine_type)
    limits = catalog.n1_gpu_limits.get(kind)
    if shape is None or limits is None:
        return [
            FieldError(
                f"{path}.machine_spec.accelerator_type",
                f'Accelerator "{kind}" is not supported for machine type "{machine.machine_type}".',
            )
        ]
    if count not in limits:
        return [
            FieldError(
                field,
                (
                    f'Accelerator "{kind}" is not supported for machine type "{machine.machine_type}" '
                    f"with count {count}. Supported counts: {', '.join(map(str, sorted(limits)))}."
                ),
            )
        ]
    vcpus, memory = shape
    max_vcpus, max_memory = limits[count]
    if vcpus > max_vcpus or memory > max_memory:
        return [
            FieldError(
                field,
                (
                    f"{count} x {kind} supports at most {max_vcpus} vCPUs and {max_memory} GB of memory; machine type "
                    f'"{machine.machine_type}" has {vcpus} vCPUs and {memory:g} GB. '
                    "Use more GPUs or a smaller machine type."
                ),
            )
        ]
    return []


def check_pool(index: int, spec: WorkerPoolSpec, catalog: MachineCatalog) -> list[FieldError]:
    """One non-empty worker pool."""
    path = f"job_spec.worker_pool_specs[{index}]"
    errors = []
    if not spec.machine_spec.machine_type:
        errors.append(FieldError(f"{path}.machine_spec.machine_type", "Required field is not set."))
    else:
        errors.extend(check_machine(path, spec, catalog))
    if index == 0 and spec.replica_count != 1:
        errors.append(
            FieldError(
                f"{path}.replica_count",
                f"The primary worker pool must have exactly 1 replica, found {spec.replica_count}.",
            )
        )
    elif spec.replica_count < 1:
        errors.append(FieldError(f"{path}.replica_count", "Replica count must be at least 1 for a used worker pool."))
    has_container = bool(spec.container_spec.image_uri)
    has_python = bool(spec.python_package_spec.executor_image_uri or spec.python_package_spec.python_module)
    if has_container == has_python:
        errors.append(FieldError(f"{path}.task", "Exactly one of container_spec or python_package_spec must be set."))
    elif has_python:
        package = spec.python_package_spec
        for name in ("executor_image_uri", "python_module"):
            if not getattr(package, name):
                errors.append(FieldError(f"{path}.python_package_spec.{name}", "Required field is not set."))
        bad = [uri for uri in package.package_uris if not uri.startswith("gs://")]
        if bad:
            errors.append(
                FieldError(
                    f"{path}.python_package_spec.package_uris",
                    f"Package URIs must be Cloud Storage URIs (gs://...), found {bad[0]}.",
                )
            )
    env = spec.container_spec.env if has_container else spec.python_package_spec.env
    if len(env) > MAX_ENV_VARS:
        errors.append(FieldError(f"{path}.env", f"At most {MAX_ENV_VARS} environment variables, found {len(env)}."))
    if index == 2 and is_reduction_server(index, spec) and spec.machine_spec.accelerator_count:
        errors.append(FieldError(f"{path}.machine_spec", "Reduction Server replicas run on CPU machine types."))
    return errors


def check_scheduling(job: CustomJob) -> list[FieldError]:
    scheduling = job.job_spec.scheduling
    errors = []
    limit = duration_of(scheduling.timeout)
    timeout = limit.total_seconds() if limit else None
    if timeout is not None and timeout <= 0:
        errors.append(FieldError("job_spec.scheduling.timeout", "The timeout must be positive."))
    if scheduling.strategy.name == "FLEX_START":
        if timeout is not None and timeout > MAX_FLEX_TIMEOUT_SECONDS:
            errors.append(FieldError("job_spec.scheduling.timeout", "FLEX_START jobs allow at most 7 days."))
        used = [spec for spec in job.job_spec.worker_pool_specs if not is_empty_pool(spec)]
        if len({WorkerPoolSpec.serialize(WorkerPoolSpec(machine_spec=s.machine_spec)) for s in used}) > 1:
            errors.append(
                FieldError(
                    "job_spec.worker_pool_specs",
                    "All worker pools of a FLEX_START job must use the same machine configuration.",
                )
            )
    return errors


def validate_custom_job(job: CustomJob, catalog: MachineCatalog | None = None) -> list[FieldError]:
    """Every reason Vertex would refuse this CustomJob; empty when it is acceptable."""
    catalog = catalog or load_catalog()
    errors = []
    if not job.display_name:
        errors.append(FieldError("display_name", "Required field is not set."))
    elif len(job.display_name) > MAX_DISPLAY_NAME:
        errors.append(FieldError("display_name", f"The display name must be at most {MAX_DISPLAY_NAME} characters."))
    errors.extend(check_labels(dict(job.labels)))
    pools = list(job.job_spec.worker_pool_specs)
    if not pools or is_empty_pool(pools[0]):
        errors.append(FieldError("job_spec.worker_pool_specs[0]", "The primary worker pool (index 0) is required."))
    for index, spec in enumerate(pools):
        if is_empty_pool(spec):
            continue
        errors.extend(check_pool(index, spec, catalog))
    base = job.job_spec.base_output_directory.output_uri_prefix
    if base and not base.startswith("gs://"):
        errors.append(
            FieldError(
                "job_spec.base_output_directory.output_uri_prefix",
                f"The output directory must be a Cloud Storage URI (gs://...), found {base}.",
            )
        )
    errors.extend(check_scheduling(job))
    return errors
