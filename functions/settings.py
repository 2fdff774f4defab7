"""Settings for the functions, read once from the environment into a frozen record. Missing values fail by name."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from deploy.images import trainer_image_uri
from deploy.topology import load_topology


class SettingsError(RuntimeError):
    """A required environment variable is missing or malformed."""


@dataclass(frozen=True)
class Settings:
    project: str
    """GOOGLE_CLOUD_PROJECT."""
    landing_bucket: str
    """LANDFALL_LANDING_BUCKET (default: topology bucket.name)."""
    dataset_prefix: str
    output_bucket: str
    """LANDFALL_OUTPUT_BUCKET: where job outputs go (default: the landing bucket)."""
    runs_prefix: str
    runs_collection: str
    datasets_collection: str
    dataset_versions_collection: str
    requests_topic: str
    default_region: str
    allowed_buckets: tuple[str, ...]
    """LANDFALL_ALLOWED_BUCKETS (comma-separated): datasets must live in one of these (default: landing bucket)."""
    vertex_endpoint: str
    """LANDFALL_VERTEX_ENDPOINT host:port of the Vertex emulator; "" = Google's regional endpoints."""
    trainer_package_uri: str
    """LANDFALL_TRAINER_PACKAGE_URI: gs:// sdist of trainer/ that Vertex installs (default under the output bucket)."""
    executor_image_gpu: str
    executor_image_cpu: str
    submission_lease_seconds: int
    ingest_lease_seconds: int
    """LANDFALL_INGEST_LEASE_SECONDS: how long one delivery owns a dataset version before another may take over."""
    list_page_size: int
    """LANDFALL_LIST_PAGE_SIZE: objects per page when listing a dataset prefix (Cloud Storage allows up to 1000)."""
    routes_file: str
    """LANDFALL_ROUTES_FILE: path of a routes TOML to use instead of the shipped deploy/routes.toml ("" = shipped)."""
    storage_emulator_host: str
    """STORAGE_EMULATOR_HOST: fake-gcs-server's URL; "" = Google Cloud Storage. When set, the storage client goes
    anonymous (google-cloud-storage itself reads the same variable for the endpoint)."""
    trainer_image: str = ""
    """LANDFALL_TRAINER_IMAGE: the container image jobs run (container_spec). Default: the trainer image's URI for
    this project and the default region with the local tag (deploy/images.py), which the Vertex emulator maps to the
    local trainer; a deployment sets the image it built."""
    training_service_account: str = ""
    """LANDFALL_TRAINING_SERVICE_ACCOUNT: the email jobs run as ("" = Vertex's default identity)."""
    artifact_buckets: tuple[tuple[str, str], ...] = ()
    """LANDFALL_ARTIFACT_BUCKETS: `region=bucket,...`, where a job in that region writes its outputs (a region not
    listed writes to output_bucket)."""

    @property
    def requests_topic_path(self) -> str:
        return f"projects/{self.project}/topics/{self.requests_topic}"


def settings_from_env(env: Mapping[str, str]) -> Settings:
    topology = load_topology()

    def need(name: str, default: str | None = None) -> str:
        value = env.get(name, default)
        if not value:
            raise SettingsError(f"environment variable {name} is not set; the local stack writes it to "
                                ".landfall/env (`landfall up`), a deployment sets it on the function.")
        return value

    landing = need("LANDFALL_LANDING_BUCKET", topology.bucket)
    output = env.get("LANDFALL_OUTPUT_BUCKET") or landing
    allowed = tuple(b.strip() for b in env.get("LANDFALL_ALLOWED_BUCKETS", landing).split(",") if b.strip())

    def positive(name: str, default: int, upper: int = 86_400) -> int:
        raw = env.get(name, str(default))
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if not 1 <= value <= upper:
            raise SettingsError(f"{name} must be a whole number from 1 to {upper}, got {raw!r}")
        return value
    return Settings(
        project=need("GOOGLE_CLOUD_PROJECT"),
        landing_bucket=landing,
        dataset_prefix=env.get("LANDFALL_DATASET_PREFIX", topology.dataset_prefix),
        output_bucket=output,
        runs_prefix=topology.runs_prefix,
        runs_collection=env.get("LANDFALL_RUNS_COLLECTION", topology.runs_collection),
        datasets_collection=env.get("LANDFALL_DATASETS_COLLECTION", topology.datasets_collection),
        dataset_versions_collection=env.get("LANDFALL_DATASET_VERSIONS_COLLECTION",
                                            topology.dataset_versions_collection),
        requests_topic=env.get("LANDFALL_REQUESTS_TOPIC", topology.requests_topic),
        default_region=env.get("LANDFALL_DEFAULT_REGION", topology.default_region),
        allowed_buckets=allowed,
        vertex_endpoint=env.get("LANDFALL_VERTEX_ENDPOINT", ""),
        trainer_package_uri=env.get("LANDFALL_TRAINER_PACKAGE_URI", f"gs://{output}/landfall/trainer-0.1.0.tar.gz"),
        executor_image_gpu=env.get("LANDFALL_EXECUTOR_IMAGE_GPU",
                                   "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"),
        executor_image_cpu=env.get("LANDFALL_EXECUTOR_IMAGE_CPU",
                                   "us-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-4.py310:latest"),
        submission_lease_seconds=positive("LANDFALL_SUBMISSION_LEASE_SECONDS", 120),
        ingest_lease_seconds=positive("LANDFALL_INGEST_LEASE_SECONDS", 60),
        list_page_size=positive("LANDFALL_LIST_PAGE_SIZE", 1000, upper=1000),
        routes_file=env.get("LANDFALL_ROUTES_FILE", ""),
        storage_emulator_host=env.get("STORAGE_EMULATOR_HOST", ""),
        trainer_image=env.get("LANDFALL_TRAINER_IMAGE") or trainer_image_uri(
            need("GOOGLE_CLOUD_PROJECT"), env.get("LANDFALL_DEFAULT_REGION", topology.default_region)),
        training_service_account=env.get("LANDFALL_TRAINING_SERVICE_ACCOUNT", ""),
        artifact_buckets=_region_buckets(env.get("LANDFALL_ARTIFACT_BUCKETS", "")),
    )


def _region_buckets(raw: str) -> tuple[tuple[str, str], ...]:
    """`us-central1=b1,europe-west4=b2` as ((region, bucket), ...); a malformed entry fails by name."""
    pairs = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        region, _, bucket = entry.partition("=")
        if not region.strip() or not bucket.strip():
            raise SettingsError(f"LANDFALL_ARTIFACT_BUCKETS entries must be REGION=BUCKET, got {entry!r}")
        pairs.append((region.strip(), bucket.strip()))
    return tuple(pairs)


@cache
def get_settings() -> Settings:
    """The process's settings, read on first use (never at import time)."""
    return settings_from_env(os.environ)
