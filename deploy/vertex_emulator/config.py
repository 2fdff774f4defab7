"""Reading the emulator's optional files: the fault plan (JSON or TOML) and the container image map (JSON)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path


class ConfigError(ValueError):
    """A configuration file or control request is malformed; the message says what was expected."""


def read_document(path: Path) -> dict[str, object]:
    """A JSON (`.json`) or TOML (`.toml`) file as a dict."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"Cannot read {path}: {error.strerror}. Pass an existing file.") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        kind = "TOML" if path.suffix == ".toml" else "JSON"
        raise ConfigError(f"{path} is not valid {kind}: {error}.") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold an object at the top level, found {type(data).__name__}.")
    return data


def load_images(path: Path) -> dict[str, tuple[str, ...]]:
    """The container image map: `{"IMAGE_URI": ["entrypoint", "words"], ...}`.

    An image listed here may be used by a container_spec; its `command` (or, when the spec gives none, the
    entrypoint listed here) runs as a local process. An empty list means the spec must give a command.
    """
    data = read_document(path)
    images: dict[str, tuple[str, ...]] = {}
    for image, entrypoint in data.items():
        if not isinstance(entrypoint, list) or not all(isinstance(word, str) for word in entrypoint):
            raise ConfigError(
                f'{path}: the entrypoint for image "{image}" must be a list of strings such as '
                f'["python", "-m", "trainer.launcher"], found {entrypoint!r}.'
            )
        images[image] = tuple(entrypoint)
    return images
