"""Lets CLI commands reach the local stack without `source .landfall/env`: its variables fill what is unset."""

from __future__ import annotations

import os
from pathlib import Path

from deploy.local.provision import default_state_dir


def load_stack_env(state_dir: Path | None = None) -> bool:
    """Set the stack's variables that the environment does not already set; True when a stack env was found."""
    env_file = (state_dir or default_state_dir()) / "env"
    if not env_file.exists():
        return False
    for line in env_file.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            os.environ.setdefault(key.strip(), value.strip())
    return True
