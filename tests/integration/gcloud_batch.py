"""Run many gcloud command lines through one gcloud interpreter: gcloud's own CLI object, built once.

Run with the Python gcloud itself runs under (`gcloud info --format=value(basic.python_location)`) and the SDK's
`lib` directory as the only argument: one JSON argv per line on stdin, one JSON verdict per line on stdout
(`{"argv": [...], "returncode": N, "stderr": "..."}`).

Each command goes through `cli.Execute`, the same call `gcloud_main.main` makes for one command line: gcloud parses
the command groups, flags, enum values and files named by flags, then asks for credentials. Calliope pushes and pops
its per-invocation properties around every call (the CLI is reused the same way by gcloud's own tests), so one
command's `--project` does not leak into the next. Starting gcloud once instead of once per command is what makes
checking every command the deployer prints cheap: about a second of CPU per gcloud start against a few
milliseconds per parsed command.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import sys


def main() -> None:
    lib = sys.argv[1]
    sys.path[:0] = [os.path.join(lib, "third_party"), lib]
    launcher = importlib.import_module("gcloud")  # gcloud.py: the vendored `google` package first, as gcloud does
    launcher._fix_google_module()
    gcloud_main = importlib.import_module("googlecloudsdk.gcloud_main")
    log = importlib.import_module("googlecloudsdk.core.log")
    cli = gcloud_main.CreateCLI([])
    out = sys.stdout
    for line in sys.stdin:
        argv = json.loads(line)
        captured, discarded = io.StringIO(), io.StringIO()
        log.Reset(discarded, captured)  # gcloud's log writers hold their streams: point them at this command's
        sys.stdout, sys.stderr = discarded, captured  # argparse writes usage errors to sys.stderr itself
        returncode = 0
        try:
            cli.Execute(argv[1:])
        except SystemExit as exit_:  # calliope exits for argument errors and for handled (known) errors
            returncode = exit_.code if isinstance(exit_.code, int) else 1
        except Exception as crash:  # gcloud_main's crash handler would report it: a failure to look into
            returncode = 1
            captured.write(f"gcloud crashed: {type(crash).__name__}: {crash}")
        finally:
            sys.stdout, sys.stderr = out, sys.__stderr__
        out.write(json.dumps({"argv": argv, "returncode": returncode, "stderr": captured.getvalue()}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
