"""Print pip's package sources as `uv pip install` flags, for `make install`.

uv does not read pip.conf or PIP_* variables, so without these flags it would ignore where this machine keeps its
wheels (find-links: e.g. torch's CPU build) and its constraints, and pull other builds (a multi-GB CUDA torch).
Reads `python -m pip config list` (every pip.conf and PIP_* variable, as pip merges them) and maps:

    index-url -> --index-url        extra-index-url -> --extra-index-url (each)   find-links -> --find-links (each)
    constraint -> --constraint      cert -> --system-certs (uv then trusts the system's certificates, as pip does)

and always --index-strategy unsafe-best-match: like pip, take the best version from all indexes and find-links
(uv otherwise stops at the first index that has the package, e.g. an old grpcio in a local mirror).

Usage: python scripts/uv_sources.py   (prints one line of flags; nothing when pip has no configuration)
"""

from __future__ import annotations

import shlex
import subprocess
import sys

FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}
"""pip option -> uv pip install flag; an option whose value lists several places (space-separated) repeats it."""


def pip_config(python: str = sys.executable) -> dict[str, str]:
    """pip's merged configuration: option -> value (the environment wins over the files, as in pip)."""
    listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    settings: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in listed.stdout.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        scope, _, option = key.rpartition(".")
        (env if scope == ":env:" else settings)[option] = value.strip().strip("'\"")
    return settings | env


def uv_flags(config: dict[str, str]) -> list[str]:
    flags = ["--index-strategy", "unsafe-best-match"]
    for option, flag in FLAGS.items():
        for value in config.get(option, "").split():
            flags += [flag, value]
    if config.get("cert"):
        flags.append("--system-certs")
    return flags


if __name__ == "__main__":
    print(shlex.join(uv_flags(pip_config())))
