"""The `__main__.py` of a folder that `landfall submit --script DIR` packs (landfall/code_folder.py): standard library
only, since it runs in the trainer image before anything of the team's is installed.

`python FOLDER.pyz ARGS` (what the trainer image's launcher runs for a script) runs this file from inside the archive.
It unpacks the archive once per node into a folder beside it (named for the archive's content, made under a
temporary name and renamed into place, so that the node's processes, started together, share one copy), then
replaces itself with `python ENTRY ARGS`: the entry point runs as a script run from the folder would, its own folder
first on sys.path (so its sibling modules import), `__file__` a real path, signals and exit status its own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

ENTRY_MEMBER = "__landfall_entry__"
"""The archive member that holds the entry point's path inside the folder."""


def unpacked(archive: Path) -> Path:
    """The folder the archive unpacks to beside it, unpacked now unless another process already did."""
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
    folder = archive.parent / f"{archive.stem}-{digest}"
    if folder.is_dir():
        return folder
    staging = Path(tempfile.mkdtemp(prefix=f".{archive.stem}-", dir=archive.parent))
    with zipfile.ZipFile(archive) as packed:
        packed.extractall(staging)  # zipfile drops absolute paths and ".." from member names
    try:
        staging.rename(folder)
    except OSError:  # another process of this node renamed its copy first: use that one
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def main() -> None:
    folder = unpacked(Path(sys.argv[0]).resolve())
    entry = folder / (folder / ENTRY_MEMBER).read_text().strip()
    if not entry.resolve().is_relative_to(folder.resolve()):
        sys.exit(f"{ENTRY_MEMBER} names {entry}, outside the unpacked folder {folder}")
    os.execv(sys.executable, [sys.executable, str(entry), *sys.argv[1:]])


if __name__ == "__main__":
    main()
