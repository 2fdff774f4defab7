"""Pick the corpus for a task."""

from __future__ import annotations

from schemas.data_objects import DataRead
from schemas.model_presets import GptPreset, get_preset
from trainer.config import TrainConfig
from trainer.datasets.shards import dataset_files
from trainer.datasets.tabular import TabularCorpus
from trainer.datasets.text import TextCorpus
from trainer.errors import ConfigError


def build_corpus(config: TrainConfig, world_size: int) -> tuple[TabularCorpus | TextCorpus, DataRead]:
    """The task's corpus over the dataset version's files (--data-objects / --data-digest, else the files under
    --data-uri), cut into units for the data-parallel groups of world_size processes (every process of a tensor-
    parallel group or pipeline reads the same unit), and what those files are."""
    world_size = config.layout(world_size).data_parallel
    data = dataset_files(config.data_uri, config.data_objects, config.data_digest)
    files, read = data.files, data.read
    hp = config.hparams
    if config.task == "causal-lm":
        preset = get_preset(config.model)
        if not isinstance(preset, GptPreset):
            raise ConfigError(f"--model={config.model} is an {preset.family} preset; --task=causal-lm needs gpt-*")
        return TextCorpus(files, preset.seq_len, hp.data_format, world_size, hp.val_fraction), read
    corpus = TabularCorpus(files, config.task, config.label_column, hp.data_format, world_size, hp.val_fraction)
    return corpus, read
