"""trainer.requirements: each line is a package specifier and nothing else.

A line is what PEP 508 calls a requirement by name: `NAME[EXTRAS] VERSIONS[; MARKER]`, e.g. `pandas==2.2.3` or
`torchmetrics[image]>=1.4; python_version >= "3.10"` (read by `packaging.requirements.Requirement`, the parser pip
and uv follow). Never an installer option (`--target=...`, `--index-url ...`, `-r file`, `-e .`), a URL (`NAME @ URL`
or a bare one), a local path or an archive file name: those would choose where code comes from or where it is
installed, which the code bucket and the trainer's own environment decide. The packages come from the installer's
default index (PyPI); code of the team's own goes to the code bucket (`trainer.package_uris`).

The dispatcher refuses a request holding any other line before a job exists, and the trainer checks each line again
before installing (trainer/user_code.py), where the lines are also put after `--`, so none can be read as an option.
"""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement

from schemas.errors import SchemaError

MAX_REQUIREMENTS = 256
"""The most lines trainer.requirements may hold."""
MAX_LINE_CHARS = 512

ALLOWED = (
    "a requirement line is a package specifier only (PEP 508: NAME[EXTRAS] VERSIONS[; MARKER], e.g. "
    "'pandas==2.2.3'), installed from the default index: no installer options, URLs, paths or editable installs; "
    "put your own code in the code bucket (trainer.package_uris)"
)
"""What a refusal says is allowed."""

_ARCHIVE = re.compile(r"\.(?:whl|zip|tar|tgz|tbz|txz|tar\.gz|tar\.bz2|tar\.xz)$", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def requirement_problem(line: str) -> str | None:
    """Why line is not a package specifier (None when it is one)."""
    text = line.strip()
    if not text:
        return "is empty"
    if len(line) > MAX_LINE_CHARS:
        return f"is longer than {MAX_LINE_CHARS} characters"
    if _CONTROL.search(line):
        return "holds a line break or another control character (one requirement per line)"
    if text.startswith("-"):
        return "is an installer option"
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        if "://" in text or text.startswith((".", "/", "~")) or "/" in text or "\\" in text:
            return "is a URL or a path"
        return "is not a package specifier"
    if requirement.url:
        return "names a URL (NAME @ URL)"
    if _ARCHIVE.search(requirement.name):
        return "names an archive file, which the installer would read as a path"
    return None


def check_requirements(lines: tuple[str, ...], field: str) -> None:
    """SchemaError naming the first line that is not a package specifier, its index, and what is allowed."""
    if len(lines) > MAX_REQUIREMENTS:
        raise SchemaError(f"has {len(lines)} lines; at most {MAX_REQUIREMENTS}", field=field)
    for i, line in enumerate(lines):
        problem = requirement_problem(line)
        if problem is not None:
            shown = line if len(line) <= 200 else line[:200] + "..."
            raise SchemaError(f"{shown!r} {problem}; {ALLOWED}", field=f"{field}[{i}]")
