"""A TrainingRequest's `trainer` and `workload` objects: the team's own training code, and how big its work is.

`trainer` absent (or {}) means Landfall's built-in trainer (trainer/). Otherwise exactly one form:

- script:  `script` (gs:// URI of one Python file, Vertex's `script_path`, or of a folder's `.pyz` archive) with
  optional `requirements`;
- package: `package_uris` (gs:// sdists or wheels) with `python_module` (Vertex's pythonPackageSpec), optional
  `requirements`;
- image:   `image_uri` with optional `command` (Vertex's containerSpec).

`args` and `env` go to every form; `launch` (vocabulary.LAUNCH_MODES) says whether Landfall starts one process per
GPU (torchrun style) or one per node. docs/trainer-contract.md is what the code gets when it runs.

`workload` tells the planner the size of code Landfall did not write (functions/planning/inputs.py reads it).
Structural checks only (the grammar of each URI, schemas/uris.py; requirement lines, schemas/requirement_lines.py; no
unknown field): which buckets and images are allowed is the dispatcher's (functions/dispatch/request_rules.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from schemas.errors import SchemaError
from schemas.fields import Reader, names_of
from schemas.gpus import parse_capability
from schemas.requirement_lines import check_requirements
from schemas.uris import parse_gcs_uri, parse_image
from schemas.vocabulary import LAUNCH_MODES, MODEL_PARALLELISM

SCRIPT_SUFFIXES = (".py", ".pyz")
"""trainer.script: a Python file, or a folder packed as a zip application (PEP 441) whose __main__.py runs its entry
point (landfall/code_folder.py); `python SCRIPT ARGS` runs either."""
CHECKPOINT_DIR_ENV = "LANDFALL_CHECKPOINT_DIR"
"""A team's checkpoint folder, which stands for AIP_CHECKPOINT_DIR (docs/trainer-contract.md, "Checkpoints"): its FUSE
path in an image's env; set by the launcher for a script or a package (trainer/checkpoint_folder.py)."""
RESUME_STEP_ENV = "LANDFALL_RESUME_STEP"
"""The step of the newest committed checkpoint in LANDFALL_CHECKPOINT_DIR when the code starts (a folder `step-N`,
N in nine digits, holding `commit.json`: the layout the built-in trainer writes); unset when there is none. Set by
Landfall's launcher, which runs a script or a package; an image looks in its folder itself (docs/trainer-contract.md,
"Checkpoints")."""
CONTRACT_ENV_PREFIXES = ("LANDFALL_", "AIP_", "CLOUD_ML_")
"""trainer.env may not set variables the contract sets (docs/trainer-contract.md)."""
CONTRACT_ENV_NAMES = frozenset(
    {
        "CLUSTER_SPEC",
        "TF_CONFIG",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
    }
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
MAX_ENV = 64
"""Vertex takes at most 100 env entries per pool; the contract uses the rest."""


@dataclass(frozen=True)
class TrainerSpec:
    """The team's training code; every field empty = Landfall's built-in trainer."""

    script: str = ""
    """gs://CODE_BUCKET/.../train.py: one Python file, run as `python train.py ARGS` (Vertex's script_path); or
    .../DIR.pyz, a folder packed by `landfall submit --script DIR`, run the same way."""
    requirements: tuple[str, ...] = ()
    """Package specifiers installed before the script or package runs (e.g. "pandas==2.2.3"); never an installer
    option, URL or path (schemas/requirement_lines.py)."""
    package_uris: tuple[str, ...] = ()
    """gs://CODE_BUCKET/... sdists or wheels installed before python_module runs (Vertex's pythonPackageSpec)."""
    python_module: str = ""
    """The module run as `python -m MODULE ARGS` once package_uris are installed."""
    image_uri: str = ""
    """The team's container image (Vertex's containerSpec.imageUri), from LANDFALL_ALLOWED_IMAGE_PREFIXES."""
    command: tuple[str, ...] = ()
    """Image form: the command replacing the image's ENTRYPOINT; empty = the image's own. With args, taken only for
    images from the deployment's own repository or LANDFALL_COMMAND_IMAGE_PREFIXES (docs/trainer-contract.md)."""
    args: tuple[str, ...] = ()
    """Arguments given to the script, module or image command."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for every process (not the contract's own names)."""
    launch: str = ""
    """per-gpu (default for an own trainer) or per-node (vocabulary.LAUNCH_MODES); "" for the built-in trainer."""
    gpu_capabilities: tuple[str, ...] = ()
    """Image form: the CUDA compute capabilities ("X.Y", e.g. "9.0" for sm_90) the image carries kernels for; the
    planner plans only GPUs it runs on. Empty = assumed from the CUDA version its reference names (else CUDA 12's),
    stated in the plan. A script or package runs on Landfall's images, which declare their own."""

    @property
    def form(self) -> str:
        """One of vocabulary.TRAINER_FORMS."""
        if self.script:
            return "script"
        if self.package_uris:
            return "package"
        if self.image_uri:
            return "image"
        return "built-in"

    @property
    def builtin(self) -> bool:
        return self.form == "built-in"


@dataclass(frozen=True)
class WorkloadSpec:
    """The size of the work, for code the planner cannot read (all zero = not given)."""

    parameters: int = 0
    """Trainable parameters of the model."""
    layers: int = 0
    """Transformer blocks (with hidden_size and seq_len the planner sizes it as a transformer; else 6 x parameters
    FLOPs per sample, like an MLP)."""
    hidden_size: int = 0
    """Width of the model (d_model)."""
    seq_len: int = 0
    """Tokens per sample (sequence length)."""
    samples_per_epoch: int = 0
    """Samples one epoch reads, when the dataset's size does not say it."""
    tokens_per_epoch: int = 0
    """Tokens one epoch reads (sequence models), when the dataset's size does not say it."""
    memory_gib_per_gpu: float = 0.0
    """Measured: GiB of accelerator memory one process needs at the planned micro-batch (overrides the model)."""
    step_seconds: float = 0.0
    """Measured: seconds per optimizer step of the global batch on one GPU of the pinned or cheapest kind (overrides
    the time model)."""
    flops_per_sample: float = 0.0
    """Training FLOPs of one sample, forward and backward (about 3 x the forward FLOPs): replaces the modelled FLOPs
    in the time model, for models the transformer shape does not describe (CNN, ViT, diffusion, mixture of
    experts). 0 = modelled from the parameters."""
    activation_gib_per_sample: float = 0.0
    """GiB of activations one sample keeps for the backward pass, at the run's precision: replaces the modelled
    activation memory when the planner chooses the micro-batch that fits. 0 = modelled."""
    trainable_parameters: int = 0
    """Parameters that train, when fewer than `parameters` (adapters, LoRA): gradients and optimizer states are
    sized on these only, the frozen rest as weights at the run's precision. 0 = every parameter trains."""
    parallelism: tuple[str, ...] = ()
    """The model-parallel layouts the code runs (vocabulary.MODEL_PARALLELISM: "tensor", "pipeline"): the planner
    weighs them only where listed, and the job's processes then read the chosen mesh from LANDFALL_TENSOR_PARALLEL,
    LANDFALL_PIPELINE_PARALLEL and LANDFALL_DATA_PARALLEL. () = data parallelism only."""

    @property
    def given(self) -> bool:
        return self != WorkloadSpec()

    @property
    def measured(self) -> bool:
        return self.memory_gib_per_gpu > 0 and self.step_seconds > 0


def parse_trainer(r: Reader | None) -> TrainerSpec:
    """Read `trainer` (None or {} = built-in); SchemaError names the field and the forms it may take."""
    if r is None or not r.data:
        return TrainerSpec()
    r.only(names_of(TrainerSpec))
    spec = TrainerSpec(
        script=r.string("script", "", max_len=1100),
        requirements=r.strings("requirements", ()),
        package_uris=r.strings("package_uris", ()),
        python_module=r.string("python_module", "", max_len=256),
        image_uri=r.string("image_uri", "", max_len=1024),
        command=r.strings("command", ()),
        args=r.strings("args", ()),
        env=r.string_map("env", {}),
        launch=r.string("launch", "", choices=("", *LAUNCH_MODES)),
        gpu_capabilities=r.strings("gpu_capabilities", ()),
    )
    if spec == TrainerSpec():  # the canonical form of a built-in request: every field empty
        return spec
    forms = [
        name
        for name, given in (
            ("trainer.script", bool(spec.script)),
            ("trainer.package_uris + trainer.python_module", bool(spec.package_uris or spec.python_module)),
            ("trainer.image_uri", bool(spec.image_uri)),
        )
        if given
    ]
    if len(forms) != 1:
        found = " and ".join(forms) if forms else "none of them"
        raise SchemaError(
            "give exactly one of trainer.script (a gs:// Python file), trainer.package_uris with "
            f"trainer.python_module (gs:// sdists or wheels and the module to run), or trainer.image_uri (a "
            f"container); found {found}. Leave `trainer` out for Landfall's built-in trainer",
            field="trainer",
        )
    if not spec.launch:
        spec = replace(spec, launch=LAUNCH_MODES[0])
    if spec.package_uris and not spec.python_module:
        raise SchemaError(
            "is required with trainer.package_uris: the module to run, e.g. 'trainer.task'",
            field="trainer.python_module",
        )
    if spec.python_module and not spec.package_uris:
        raise SchemaError(
            "is required with trainer.python_module: gs:// URIs of the sdists or wheels to install",
            field="trainer.package_uris",
        )
    if spec.python_module and not _MODULE.match(spec.python_module):
        raise SchemaError(f"{spec.python_module!r} is not a dotted Python module name", field="trainer.python_module")
    for name, uris in (
        ("trainer.script", (spec.script,) if spec.script else ()),
        ("trainer.package_uris", spec.package_uris),
    ):
        for uri in uris:
            parse_gcs_uri(uri, name)
    if spec.image_uri:
        parse_image(spec.image_uri, "trainer.image_uri")
    check_requirements(spec.requirements, "trainer.requirements")
    if spec.script and not spec.script.endswith(SCRIPT_SUFFIXES):
        raise SchemaError(
            f"{spec.script!r} must name a Python file (.py) or a folder's archive (.pyz, what `landfall submit "
            "--script DIR` uploads)",
            field="trainer.script",
        )
    if spec.requirements and spec.image_uri:
        raise SchemaError(
            "applies to a script or package; a container image holds its own dependencies", field="trainer.requirements"
        )
    if spec.gpu_capabilities and not spec.image_uri:
        raise SchemaError(
            "applies to trainer.image_uri only; a script or package runs on Landfall's trainer images, which declare "
            "their own (deploy/topology.toml)",
            field="trainer.gpu_capabilities",
        )
    for value in spec.gpu_capabilities:
        parse_capability(value, "trainer.gpu_capabilities")
    if spec.command and not spec.image_uri:
        raise SchemaError(
            "applies to trainer.image_uri only; a script or module runs with trainer.args", field="trainer.command"
        )
    if len(spec.env) > MAX_ENV:
        raise SchemaError(f"has {len(spec.env)} entries; at most {MAX_ENV}", field="trainer.env")
    for key in spec.env:
        if not _ENV_NAME.match(key):
            raise SchemaError(f"{key!r} is not an environment variable name", field="trainer.env")
        if key in CONTRACT_ENV_NAMES or key.startswith(CONTRACT_ENV_PREFIXES):
            raise SchemaError(
                f"{key!r} is set by Landfall's trainer contract (docs/trainer-contract.md); choose another name",
                field="trainer.env",
            )
    return spec


def parse_workload(r: Reader | None) -> WorkloadSpec:
    if r is None:
        return WorkloadSpec()
    r.only(names_of(WorkloadSpec))
    spec = WorkloadSpec(
        parameters=r.integer("parameters", 0, minimum=0),
        layers=r.integer("layers", 0, minimum=0),
        hidden_size=r.integer("hidden_size", 0, minimum=0),
        seq_len=r.integer("seq_len", 0, minimum=0),
        samples_per_epoch=r.integer("samples_per_epoch", 0, minimum=0),
        tokens_per_epoch=r.integer("tokens_per_epoch", 0, minimum=0),
        memory_gib_per_gpu=r.number("memory_gib_per_gpu", 0.0, minimum=0.0),
        step_seconds=r.number("step_seconds", 0.0, minimum=0.0),
        flops_per_sample=_bounded(r, "flops_per_sample", MAX_FLOPS_PER_SAMPLE, "FLOPs"),
        activation_gib_per_sample=_bounded(r, "activation_gib_per_sample", MAX_ACTIVATION_GIB_PER_SAMPLE, "GiB"),
        trainable_parameters=r.integer("trainable_parameters", 0, minimum=0),
        parallelism=_parallelism(r),
    )
    _check_trainable(spec)
    return spec


def _parallelism(r: Reader) -> tuple[str, ...]:
    """workload.parallelism: a list of distinct vocabulary.MODEL_PARALLELISM names."""
    kinds = r.strings("parallelism", ())
    for i, kind in enumerate(kinds):
        if kind not in MODEL_PARALLELISM:
            raise SchemaError(
                f"expected one of {', '.join(map(repr, MODEL_PARALLELISM))} (the layouts the code runs), got {kind!r}",
                field=f"workload.parallelism[{i}]",
            )
    if len(set(kinds)) != len(kinds):
        raise SchemaError("lists a layout twice: name each one once", field="workload.parallelism")
    return kinds


MAX_FLOPS_PER_SAMPLE = 1e21
"""The most training FLOPs one sample may declare: a 1T-parameter model over 100k tokens is about 6e17."""
MAX_ACTIVATION_GIB_PER_SAMPLE = 4096.0
"""The most activation GiB one sample may declare: more than any accelerator's memory by far."""


def _bounded(r: Reader, key: str, most: float, unit: str) -> float:
    """A declared figure: 0 (not given) or a finite number in (0, most]."""
    value = r.number(key, 0.0, minimum=0.0)
    if value > most:
        raise SchemaError(
            f"must be at most {most:g} {unit} per sample, got {value:g}: give the figure for one sample, not a "
            "batch or a whole run",
            field=f"workload.{key}",
        )
    return value


def _check_trainable(spec: WorkloadSpec) -> None:
    """trainable_parameters is a part of the model: at most workload.parameters when both are given."""
    if spec.trainable_parameters and spec.parameters and spec.trainable_parameters > spec.parameters:
        raise SchemaError(
            f"is {spec.trainable_parameters:,}, more than workload.parameters ({spec.parameters:,}): it counts the "
            "parameters that train (adapters, LoRA), a part of the whole model; give at most workload.parameters, "
            "or leave it out when every parameter trains",
            field="workload.trainable_parameters",
        )
