"""Where the emulator keeps each job's files: the job record and one log file per replica.

Layout under the state directory:

    DIR/jobs/<job_id>/job.json              the CustomJob as proto JSON (the on-disk job table)
    DIR/jobs/<job_id>/processes.json        the replica process groups and marks (to clean up after a crash)
    DIR/jobs/<job_id>/<replica>.log         stdout and stderr of one replica, e.g. workerpool0-0.log

Log files are kept after the job ends and after DeleteCustomJob, so they can be read later.
"""

from __future__ import annotations

from pathlib import Path

JOB_FILE = "job.json"
PROCESSES_FILE = "processes.json"
LOG_SUFFIX = ".log"


def job_dir(state_dir: Path | str, job_id: str) -> Path:
    """The folder that holds everything the emulator keeps about one job."""
    return Path(state_dir) / "jobs" / job_id


def replica_log_path(state_dir: Path | str, job_id: str, replica: str) -> Path:
    """The log file of one replica (`workerpool<K>-<i>`) of a job."""
    return job_dir(state_dir, job_id) / f"{replica}{LOG_SUFFIX}"


def replica_log_paths(state_dir: Path | str, job_id: str) -> dict[str, Path]:
    """Map each replica name of a job (`workerpool0-0`, ...) to its log file, in replica order.

    Returns an empty dict when the job has no logs yet (or the id is unknown). Replicas that were restarted
    (spot preemption) append to the same file.
    """
    folder = job_dir(state_dir, job_id)
    if not folder.is_dir():
        return {}
    paths = {p.name.removesuffix(LOG_SUFFIX): p for p in folder.glob(f"workerpool*{LOG_SUFFIX}")}
    return dict(sorted(paths.items(), key=lambda item: _replica_order(item[0])))


def _replica_order(replica: str) -> tuple[int, int]:
    """Sort key for `workerpool<K>-<i>` names: by pool, then index."""
    pool, _, index = replica.removeprefix("workerpool").partition("-")
    try:
        return int(pool), int(index)
    except ValueError:
        return (1 << 30, 0)
