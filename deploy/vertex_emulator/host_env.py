"""What of the emulator's own environment a replica gets: an allow-list, the one place that says it.

On Vertex a replica's container has only what Vertex sets (launch.py: CLUSTER_SPEC, the AIP_ folders, ...) and its
pool's `env` (the trainer contract, docs/trainer-contract.md). The emulator runs on the local stack with Landfall's
own settings in its environment: the Firestore and Pub/Sub emulators' hosts, the teams and routes files, every
LANDFALL_* setting. A replica that inherited them could write Landfall's Firestore directly, which a job on Vertex
cannot. So a replica gets, of the emulator's environment, only:

- what any process needs to run on this host: PATH, HOME, the user, locale, time zone and temporary folder, the
  Python variables (PYTHONPATH, PYTHONUNBUFFERED, ...), the virtual environment, the dynamic loader's path and the
  GPUs visible to this host, thread counts, and how the host reaches the internet (proxies, CA bundles) and installs
  packages (UV_*, PIP_*: the launcher installs a team's requirements);
- STORAGE_EMULATOR_HOST: the stand-in for the job's Cloud Storage credentials, so that it reads and writes gs:// on
  the local stack as a job on Vertex reads its buckets (the runner names the CustomJob's serviceAccount in it, and
  the stack's storage gate holds the job to that account's grants);
- coverage's variables (COVERAGE_*, COV_CORE_*), so that the test suite measures the trainer's processes too;
- the trainer's test hook (trainer/fault_hooks.py OOM_VARIABLE), which the end-to-end suite sets on the stack;
- the CPU rehearsal switch (trainer/cpu_rehearsal, LANDFALL_CPU_REHEARSAL): `LANDFALL_CPU_REHEARSAL=1 landfall up`
  runs a team's CUDA-only code on the CPU; it never reaches a job on Vertex.

Everything else (FIRESTORE_EMULATOR_HOST, PUBSUB_EMULATOR_HOST, LANDFALL_VERTEX_ENDPOINT, LANDFALL_TEAMS_FILE, the
other LANDFALL_* settings, CLOUDSDK_*, GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_CLOUD_PROJECT: the trainer takes the
project from CLOUD_ML_PROJECT_ID as on Vertex) stays with the emulator.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainer.cpu_rehearsal import REHEARSAL_ENV
from trainer.fault_hooks import OOM_VARIABLE

PASSED: frozenset[str] = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TEMP",
        "TMP",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "STORAGE_EMULATOR_HOST",
        OOM_VARIABLE,
        REHEARSAL_ENV,
    }
)
"""Variables a replica gets from the emulator's environment, by name."""
PASSED_PREFIXES: tuple[str, ...] = ("LC_", "PYTHON", "UV_", "PIP_", "COVERAGE_", "COV_CORE_")
"""Variables a replica gets by prefix: locale categories, Python's own, the installers', coverage's."""


def passed(name: str) -> bool:
    """Whether a replica gets the emulator's variable `name`."""
    return name in PASSED or name.startswith(PASSED_PREFIXES)


def host_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of the emulator's environment a replica gets."""
    return {name: value for name, value in environ.items() if passed(name)}


__all__ = ["PASSED", "PASSED_PREFIXES", "host_environment", "passed"]
