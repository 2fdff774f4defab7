"""Pick the corpus for a task."""

from __future__ import annotations

from schemas.model_presets import GptPreset, get_preset
from trainer.config import TrainConfig
from trainer.datasets.shards import data_files
from trainer.datasets.tabular import TabularCorpus
from trainer.datasets.text import TextCorpus
from trainer.errors import ConfigError


def build_corpus(config: TrainConfig, world_size: int) -> TabularCorpus | TextCorpus:
    """The task's corpus over the files under --data-uri, cut into units for world_size processes."""
    files = data_files(config.data_uri)
    hp = config.hparams
    if config.task == "causal-lm":
        preset = get_preset(config.model)
        if not isinstance(preset, GptPreset):
            raise ConfigError(f"--model={config.model} is an {preset.family} preset; --task=causal-lm needs gpt-*")
        return TextCorpus(files, preset.seq_len, hp.data_format, world_size, hp.val_fraction)
    return TabularCorpus(files, config.task, config.label_column, hp.data_format, world_size, hp.val_fraction)
