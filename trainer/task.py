"""Entry point: `python -m trainer.task --data-uri=... --task=... --model=... ...` (see trainer/config.py).

On Vertex the image's entrypoint is the launcher (trainer/launcher.py), which starts this once per GPU with
torchrun's variables, exactly as it starts a team's own script (docs/trainer-contract.md). Run by hand without
LOCAL_RANK it still fans out per GPU itself (LANDFALL_NPROC_PER_NODE on CPU); under torchrun, or with one process per
node, it trains in this process. The exit
status is what Vertex judges the replica by: 0 success, 2 bad configuration, 3 bad data, 4 out of memory,
143 stopped by SIGTERM after checkpointing. Before exiting non-zero (but for 143) a process writes its reason to
AIP_MODEL_DIR/failure.json (trainer/failure.py), which the completion listener puts on the run's error.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

from trainer.config import TrainConfig, parse_args
from trainer.distributed import (
    default_nproc_per_node,
    launched_per_process,
    read_node_topology,
    read_process_env,
    single_process_env,
)
from trainer.errors import ConfigError, OutOfMemory, Preempted, TrainerError
from trainer.failure import failure_of, record_failure
from trainer.logs import log
from trainer.vertex_env import environment_summary, required_model_dir


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = dict(os.environ)
    try:
        config = _parse(argv)
        required_model_dir(environ)
        if launched_per_process(environ):
            from trainer.run import train

            train(config, read_process_env(environ), environ)
            return 0
        topology = read_node_topology(environ, default_nproc_per_node(environ))
        log(
            "trainer starting",
            node_rank=topology.node_rank,
            nodes=topology.num_nodes,
            nproc_per_node=topology.nproc_per_node,
            launch=topology.source,
            env=environment_summary(environ),
        )
        if topology.nproc_per_node == 1:
            from trainer.run import train

            train(config, single_process_env(topology), environ)
            return 0
        from trainer.launcher import run_node

        return run_node(topology, argv, environ)
    except TrainerError as exc:
        log(str(exc), severity="ERROR", error=type(exc).__name__, exit_code=exc.exit_code)
        if not isinstance(exc, Preempted):
            record_failure(environ, failure_of(exc, exc.exit_code, environ))
        return exc.exit_code
    except MemoryError as exc:
        message = f"host out of memory: {exc}; lower --batch-size or use a machine with more RAM"
        log(message, severity="ERROR", error=OutOfMemory.__name__, exit_code=OutOfMemory.exit_code)
        record_failure(
            environ, failure_of(exc, OutOfMemory.exit_code, environ, kind=OutOfMemory.__name__, message=message)
        )
        return OutOfMemory.exit_code
    except Exception as exc:
        # A crash: record its last line for the run, then let it end the process with its traceback (status 1).
        record_failure(environ, failure_of(exc, 1, environ, message=f"{type(exc).__name__}: {exc}"))
        raise


def _parse(argv: list[str]) -> TrainConfig:
    """parse_args, with argparse's refusal (an unknown or malformed flag: usage text and exit 2) turned into a
    ConfigError carrying argparse's error line, so that it reaches the failure record like any bad setting."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            config = parse_args(argv)
    except SystemExit as exc:
        sys.stderr.write(err.getvalue())
        if exc.code in (0, None):
            raise
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        raise ConfigError(lines[-1] if lines else f"the command line was refused (exit status {exc.code})") from None
    sys.stderr.write(err.getvalue())
    return config


if __name__ == "__main__":
    sys.exit(main())
