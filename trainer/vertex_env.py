"""Vertex's output-location variables and a summary of the launch environment (no torch import: the node
launcher reads these before it starts the training processes)."""

from __future__ import annotations

from collections.abc import Mapping

from trainer.errors import ConfigError

_SUMMARY_KEYS = (
    "CLOUD_ML_JOB_ID",
    "CLOUD_ML_PROJECT_ID",
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_RANK",
    "LANDFALL_NPROC_PER_NODE",
    "AIP_MODEL_DIR",
    "AIP_CHECKPOINT_DIR",
    "AIP_TENSORBOARD_LOG_DIR",
)


def required_model_dir(environ: Mapping[str, str]) -> str:
    """AIP_MODEL_DIR, or a ConfigError saying what to set."""
    model_dir = environ.get("AIP_MODEL_DIR")
    if not model_dir:
        raise ConfigError(
            "AIP_MODEL_DIR is not set: expected gs://BUCKET/PATH/model/ or a local directory where "
            "the model and metrics.json are written (Vertex sets it from base_output_directory)"
        )
    return model_dir


def environment_summary(environ: Mapping[str, str]) -> dict[str, str]:
    """The Vertex and launcher variables present, for the first log record."""
    return {k: environ[k] for k in _SUMMARY_KEYS if k in environ}
