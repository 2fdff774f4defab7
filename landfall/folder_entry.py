"""The `__main__.py` of a folder that `landfall submit --script DIR` packs (landfall/code_folder.py): standard library
only, since it runs in the trainer image before anything of the team's is installed.

`python FOLDER.pyz ARGS` (what the trainer image's launcher runs for a script) runs this file from inside the archive.
It unpacks the archive once per node into a folder beside it (named for the archive's content, made under a
temporary name and renamed into place, so that the node's processes, started together, share one copy), then
replaces itself with `python ENTRY ARGS`: the entry point runs as a script run from the folder would, its own folder
first on sys.path (so its sibling modules import), `__file__` a real path, signals and exit status its own.

Python puts the archive first on sys.path while this runs, so a team's module named like a standard one (a
`tempfile.py` beside `main.py`) would be imported in its place: the archive leaves sys.path before anything but `os`
and `sys` (loaded with the interpreter) is imported.
"""

from __future__ import annotations

import os
import sys

ENTRY_MEMBER = "__landfall_entry__"
"""The archive member that holds the entry point's path inside the folder."""


def unpacked(archive: str) -> str:
    """The folder the archive unpacks to beside it, unpacked now unless another process already did."""
    import hashlib
    import shutil
    import tempfile
    import zipfile

    with open(archive, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    parent, name = os.path.split(archive)
    stem = os.path.splitext(name)[0]
    folder = os.path.join(parent, f"{stem}-{digest}")
    if os.path.isdir(folder):
        return folder
    staging = tempfile.mkdtemp(prefix=f".{stem}-", dir=parent)
    with zipfile.ZipFile(archive) as packed:
        packed.extractall(staging)  # zipfile drops absolute paths and ".." from member names
    try:
        os.rename(staging, folder)
    except OSError:  # another process of this node renamed its copy first: use that one
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def main() -> None:
    archive = os.path.abspath(sys.argv[0])
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != archive]
    folder = unpacked(archive)
    with open(os.path.join(folder, ENTRY_MEMBER)) as f:
        entry = os.path.realpath(os.path.join(folder, f.read().strip()))
    if os.path.commonpath([entry, os.path.realpath(folder)]) != os.path.realpath(folder):
        sys.exit(f"{ENTRY_MEMBER} names {entry}, outside the unpacked folder {folder}")
    os.execv(sys.executable, [sys.executable, entry, *sys.argv[1:]])


if __name__ == "__main__":
    main()
