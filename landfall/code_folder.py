"""`landfall submit --script DIR`: a folder of Python code packed as one runnable archive (a zip application,
PEP 441), uploaded and run as a single script is (docs/trainer-contract.md, "A folder of code").

The rules, each checked before anything is uploaded, each refusal naming the file and the limit:

- the entry point is `--entry NAME` (a `.py` path inside the folder), `main.py` by default;
- every regular file under the folder goes in, but names starting with `.` (`.git/`, `.env`, `.venv/`) and
  `__pycache__/` folders, which are never code to ship (and may hold secrets);
- a symbolic link to a file inside the folder goes in as that file's content; a link that leads outside the folder,
  a broken one and a linked folder are refused; no name may hold `..` or be absolute;
- at most MAX_FILES files and MAX_BYTES bytes in all, before compression.

The archive holds the folder's files, the path of the entry point (folder_entry.ENTRY_MEMBER) and, as its
`__main__.py`, landfall/folder_entry.py, which unpacks it beside itself and runs the entry point as a script. It is
byte-for-byte the same for the same files (sorted names, fixed timestamps and modes), so the same folder is one
object in the code bucket.
"""

from __future__ import annotations

import io
import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from landfall.errors import CommandError
from landfall.folder_entry import ENTRY_MEMBER

DEFAULT_ENTRY = "main.py"
MAX_FILES = 1000
"""Files a folder may hold (a training folder is a handful of modules and configs, not a data set)."""
MAX_BYTES = 20 * 1024 * 1024
"""Bytes the folder's files may hold in all, before compression (data goes in the dataset, weights in the bucket)."""
ARCHIVE_SUFFIX = ".pyz"
_STAMP = (1980, 1, 1, 0, 0, 0)
"""Every member's timestamp: the same files make the same bytes."""


@dataclass(frozen=True)
class PackedFolder:
    name: str
    """The archive's file name: the folder's name with ARCHIVE_SUFFIX."""
    data: bytes
    entry: str
    files: int
    """The folder's files packed (the entry point among them)."""
    size: int
    """Their bytes before compression."""


def _skipped(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__"


def entry_path(entry: str) -> str:
    """The entry point as a path inside the folder; CommandError for one that would leave it or is not a .py file."""
    path = PurePosixPath(entry.replace(os.sep, "/"))
    if not entry or path.is_absolute() or ".." in path.parts:
        raise CommandError(
            f"--entry {entry!r}: give the entry point's path inside the folder, e.g. main.py or src/train.py "
            "(not absolute, no '..')"
        )
    if path.suffix != ".py":
        raise CommandError(f"--entry {entry!r}: the entry point is a Python file (NAME.py) that `python NAME.py` runs")
    return str(path)


def folder_files(root: Path) -> list[tuple[str, Path]]:
    """(name in the archive, file to read) for every file the folder ships, sorted; CommandError on a link that
    leaves the folder, a linked folder, a broken link, or more than MAX_FILES files or MAX_BYTES bytes."""
    real_root = root.resolve()
    found: list[tuple[str, Path]] = []
    total = 0
    for current, folders, files in os.walk(root):
        here = Path(current)
        for name in sorted(folders):
            if _skipped(name):
                folders.remove(name)
            elif (here / name).is_symlink():
                raise CommandError(
                    f"{here / name} is a link to a folder: --script DIR packs regular files and links to files "
                    "inside DIR only; copy the folder in or remove the link"
                )
        for name in sorted(files):
            if _skipped(name):
                continue
            path = here / name
            target = path.resolve()
            if path.is_symlink() and not target.is_relative_to(real_root):
                raise CommandError(
                    f"{path} links to {target}, outside {root}: --script DIR packs only what is inside DIR; copy the "
                    "file in or remove the link"
                )
            try:
                info = target.stat()
            except OSError as exc:
                raise CommandError(f"cannot read {path}: {exc.strerror} (a broken link?)") from exc
            if not stat.S_ISREG(info.st_mode):
                raise CommandError(f"{path} is not a regular file: --script DIR packs regular files only")
            total += info.st_size
            found.append((path.relative_to(root).as_posix(), target))
            if len(found) > MAX_FILES:
                raise CommandError(
                    f"{root} holds more than {MAX_FILES} files (MAX_FILES) besides dot-files and __pycache__: "
                    "--script DIR is for code; put data in the dataset and leave environments (.venv) out"
                )
            if total > MAX_BYTES:
                raise CommandError(
                    f"{root} holds more than {MAX_BYTES // (1024 * 1024)} MiB (MAX_BYTES) of files (at {path}): "
                    "--script DIR is for code; put data in the dataset and weights in a bucket the code reads"
                )
    return sorted(found)


def pack_folder(root: Path, entry: str = DEFAULT_ENTRY) -> PackedFolder:
    """The folder as a runnable archive, by the rules above; CommandError naming what broke one."""
    if not root.is_dir():
        raise CommandError(f"--script {root}: not a folder")
    inside = entry_path(entry)
    files = folder_files(root)
    names = {name for name, _ in files}
    if inside not in names:
        candidates = sorted(name for name in names if "/" not in name and name.endswith(".py"))
        raise CommandError(
            f"{root} has no {inside}: the entry point of --script DIR is {DEFAULT_ENTRY} unless --entry NAME says "
            f"which file runs; its top-level Python files: {', '.join(candidates) or 'none'}"
        )
    for reserved in ("__main__.py", ENTRY_MEMBER):
        if reserved in names:
            raise CommandError(
                f"{root / reserved}: a folder's top level may not hold {reserved}, which Landfall writes into the "
                f"archive; rename it and point --entry at your entry point"
            )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        stub = Path(__file__).with_name("folder_entry.py").read_bytes()
        for name, data in [("__main__.py", stub), (ENTRY_MEMBER, inside.encode())]:
            archive.writestr(_member(name), data)
        for name, path in files:
            archive.writestr(_member(name), path.read_bytes())
    size = sum(path.stat().st_size for _, path in files)
    return PackedFolder(f"{root.resolve().name}{ARCHIVE_SUFFIX}", buffer.getvalue(), inside, len(files), size)


def _member(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_STAMP)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info
