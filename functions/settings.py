"""Settings for the functions, read once from the environment into a frozen record. Missing values fail by name."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

from deploy.images import trainer_image, trainer_image_uri
from deploy.topology import load_topology
from schemas.errors import SchemaError
from schemas.record_bounds import JOBS_KEPT
from schemas.times import parse_timestamp
from schemas.uris import parse_image_place


class SettingsError(RuntimeError):
    """A required environment variable is missing or malformed."""


GRANTS_SETTLE_SECONDS = 1800
"""A new IAM grant reaches every service "typically within 2 minutes, sometimes 7 minutes or more" (Google:
https://cloud.google.com/iam/docs/access-change-propagation), and a deploy makes its grants over the minutes it runs:
for 30 minutes after the deploy was staged a refused permission is retried, after that it is missing."""


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
    orphans_collection: str
    """LANDFALL_ORPHANS_COLLECTION (default: topology firestore.orphans_collection): the reconciler's orphan jobs."""
    requests_topic: str
    default_region: str
    """LANDFALL_DEFAULT_REGION (default: topology project.default_region): the planner's tie-break region (equal
    prices resolve to it) and the region of the trainer image's default URI."""
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
    max_job_attempts: int
    """LANDFALL_MAX_JOB_ATTEMPTS: jobs one round of plans may use before the run waits (default 3)."""
    wait_backoff_seconds: int
    """LANDFALL_WAIT_BACKOFF_SECONDS: first wait of a run refused capacity everywhere; doubles each try (cap 1 h)."""
    wait_give_up_seconds: int
    """LANDFALL_WAIT_GIVE_UP_SECONDS: a run that has waited this long (or past its request's deadline) FAILS."""
    timeout_extensions: int
    """LANDFALL_TIMEOUT_EXTENSIONS: how many times a run whose job reached its timeout while training advanced goes
    on from its newest checkpoint (default 8, at most JOBS_KEPT: each keeps its job and attempt on the run;
    functions/records/continuation.py)."""
    long_wait_seconds: int
    """LANDFALL_LONG_WAIT_SECONDS: a job queued or pending this long gets the reason noted on its run."""
    reconcile_grace_seconds: int
    """LANDFALL_RECONCILE_GRACE_SECONDS: a job that ended less than this long ago is left to the listener (its
    events are on their way; a reconcile pass writing the same run at once only makes both collide)."""
    cancel_orphans: bool
    """LANDFALL_CANCEL_ORPHANS=1 (or true, yes): the reconciler cancels labelled jobs no run names that have not
    ended (else it only records them in the orphans collection)."""
    republish_grace_seconds: int
    """LANDFALL_REPUBLISH_GRACE_SECONDS: a dataset version PUBLISHED this long ago whose run does not exist has its
    request published again by the reconciler (and again after as long, until the run exists)."""
    list_page_size: int
    """LANDFALL_LIST_PAGE_SIZE: objects per page when listing a dataset prefix (Cloud Storage allows up to 1000)."""
    routes_file: str
    """LANDFALL_ROUTES_FILE: path of a routes TOML to use instead of the shipped deploy/routes.toml ("" = shipped)."""
    storage_emulator_host: str
    """STORAGE_EMULATOR_HOST: fake-gcs-server's URL; "" = Google Cloud Storage. When set, the storage client goes
    anonymous (google-cloud-storage itself reads the same variable for the endpoint)."""
    pubsub_emulator_host: str = ""
    """PUBSUB_EMULATOR_HOST: the Pub/Sub emulator's HOST:PORT (on the local stack, for a process acting as someone, its
    Pub/Sub gate); "" = Google Cloud Pub/Sub (google-cloud-pubsub itself reads the same variable)."""
    trainer_image: str = ""
    """LANDFALL_TRAINER_IMAGE: the container image jobs run (container_spec). Default: the trainer image's URI for
    this project and the default region with the local tag (deploy/images.py), which the Vertex emulator maps to the
    local trainer; a deployment sets the image it built."""
    trainer_images: tuple[tuple[str, str], ...] = ()
    """LANDFALL_TRAINER_IMAGES: `build=uri,...`, the image of each trainer build (deploy/topology.toml
    [[trainer_image.builds]], e.g. `trainer-cu130=...`) where it is not trainer_image renamed to that build (the
    default: `landfall deploy` pushes every build with the same tag beside trainer_image)."""
    training_service_account: str = ""
    """LANDFALL_TRAINING_SERVICE_ACCOUNT: the email jobs run as ("" = Vertex's default identity)."""
    team_service_account: str = ""
    """LANDFALL_TEAM_SERVICE_ACCOUNT: the email a team's jobs run as, with {team} for the team's account id
    (deploy/teams.py team_account_id), as `landfall deploy` sets it; "" = every job runs as the training account."""
    artifact_buckets: tuple[tuple[str, str], ...] = ()
    """LANDFALL_ARTIFACT_BUCKETS: `region=bucket,...`, where a job in that region writes its outputs (a region not
    listed writes to output_bucket)."""
    quota_overrides: str = ""
    """LANDFALL_QUOTAS (a JSON object) or the file LANDFALL_QUOTAS_FILE names: the project's own quota limits, per
    region, over the planner's functions/planning/data/quotas.json, e.g.
    `{"us-central1": {"cpus": 96, "gpus": {"NVIDIA_L4": {"on_demand": 8, "preemptible": 0}}}}`; "" = none."""
    memory_margin: float | None = None
    """LANDFALL_MEMORY_MARGIN: share of each GPU's memory plans keep free, in [0, 1); None = the catalog's (10 %)."""
    timeout_margin: float | None = None
    """LANDFALL_TIMEOUT_MARGIN: scheduling.timeout = (the plan's p90 + one start-up) x this (>= 1); None = the
    catalog's."""
    reservations: str = ""
    """LANDFALL_RESERVATIONS (a JSON object): Compute Engine reservations jobs may consume, by name, e.g.
    `{"my-h100s": {"machine_type": "a3-highgpu-8g", "zone": "us-central1-a", "count": 2}}` (optional: project for a
    shared reservation, accelerator_type and accelerator_count for N1); "" = none. Its shape is checked here, its
    machines against the catalog by the planner."""
    run_results_topic: str = ""
    code_bucket: str = ""
    """LANDFALL_CODE_BUCKET (default: topology bucket.code_name): the only bucket a request's trainer.script and
    trainer.package_uris may name."""
    allowed_image_prefixes: tuple[str, ...] = ()
    """LANDFALL_ALLOWED_IMAGE_PREFIXES (comma-separated): a request's trainer.image_uri must lie under one of these.
    Default: the deployment's own Artifact Registry repository (where the trainer image lives) and Vertex AI's
    prebuilt training images (PREBUILT_TRAINING_IMAGE_PREFIXES). Each is HOST/PATH/ (images below it) or HOST/PATH/NAME,
    compared with an image's parsed reference component by component (schemas/uris.py)."""
    """LANDFALL_RUN_RESULTS_TOPIC: where RunFinished messages go (default: topology topics.run_results)."""
    command_image_prefixes: tuple[str, ...] = ()
    """LANDFALL_COMMAND_IMAGE_PREFIXES (comma-separated, the same form): images under these may also take a request's
    trainer.command and trainer.args, which images from the deployment's own repository always may; default none."""
    rate_limits_collection: str = "rate_limits"
    """LANDFALL_RATE_LIMITS_COLLECTION (default: topology firestore.rate_limits_collection): the limiter's buckets."""
    measurements_collection: str = "measurements"
    """LANDFALL_MEASUREMENTS_COLLECTION (default: topology firestore.measurements_collection): what runs measured."""
    capacity_events_collection: str = "capacity_events"
    """LANDFALL_CAPACITY_EVENTS_COLLECTION (default: topology firestore.capacity_events_collection): what capacity
    jobs met (preemptions, refusals), which the planner prices."""
    vertex_create_per_minute: int = 0
    """LANDFALL_VERTEX_CREATE_PER_MINUTE (default: topology vertex.rate_limits.create_custom_job_per_minute): the
    Vertex submissions per region and minute Landfall makes at most (its submission rate limiter: the dispatcher's
    CreateCustomJob and the Model Registry's UploadModel, both long-running-operation submissions under Google's
    per-region quota, docs/deploy.md); 0 = no limiter (Vertex's own rate-limit answers are still retried)."""
    teams_file: str = ""
    """LANDFALL_TEAMS_FILE: path of a teams TOML to use instead of the shipped deploy/teams.toml ("" = shipped, which
    holds no teams: every run allowed)."""
    teams_collection: str = "teams"
    """LANDFALL_TEAMS_COLLECTION (default: topology firestore.teams_collection): one ledger document per team."""
    model_promotions_collection: str = "model_promotions"
    """LANDFALL_MODEL_PROMOTIONS_COLLECTION (default: topology firestore.model_promotions_collection): one promotion
    lease per registry model."""
    canary_min_hours: float = 2.0
    """LANDFALL_CANARY_MIN_HOURS: a run whose plan's estimate is longer than this runs a canary job first
    (docs/canary.md)."""
    canary_first_runs: bool = True
    """LANDFALL_CANARY_FIRST_RUNS (default on; 0 turns it off): the first run of a workload on a GPU shape runs a canary
    whatever its length, unless the canary would cost more than the run at p90 (docs/canary.md)."""
    canary_margin: float = 0.25
    """LANDFALL_CANARY_MARGIN: how far (a share) the canary's step time or peak memory may be off the plan before the
    run is planned again from the canary's figures."""

    reconciler_collection: str = "reconciler"
    """LANDFALL_RECONCILER_COLLECTION (default: topology firestore.reconciler_collection): the reconciler's
    watermarks, one document per shard."""
    reconcile_shards: int = 1
    """LANDFALL_RECONCILE_SHARDS: open runs are split into this many shards by a hash of their id, and each reconcile
    pass takes one (the one whose last pass is oldest), so each run is looked at every N passes (1 to 64; default 1).
    Raise it when a pass over every open run takes too long or, where Vertex refuses the update_time filter, when a
    pass would read more jobs than Vertex's per-minute read quota allows (functions/reconciler/changes.py)."""
    reconcile_overlap_seconds: int = 300
    """LANDFALL_RECONCILE_OVERLAP_SECONDS: a pass lists the jobs updated since its shard's last pass began less this
    much (clock skew between Vertex and the reconciler, jobs updated while a pass runs)."""
    reconcile_full_after_seconds: int = 3600
    """LANDFALL_RECONCILE_FULL_AFTER_SECONDS: a watermark older than this gives a full pass (every open run's job
    read): the reconciler has not completed a pass in that region for that long."""
    orphan_window_seconds: int = 3600
    """LANDFALL_ORPHAN_WINDOW_SECONDS: besides the changed jobs, a pass judges as orphans the labelled jobs created
    within this long before its watermark (more than the submission lease plus the reconcile interval, so that each
    job is judged at least once past its grace)."""
    deployed_at: datetime | None = None
    """LANDFALL_DEPLOYED_AT (RFC 3339, set on every function by `landfall deploy`): when this deployment was staged,
    its IAM grants made with it; None where nothing deployed it (the local stack)."""
    grants_settle_seconds: int = GRANTS_SETTLE_SECONDS
    """LANDFALL_GRANTS_SETTLE_SECONDS: how long after deployed_at a refused permission is taken for a grant still on
    its way and retried (GRANTS_SETTLE_SECONDS by default), not for a grant that is missing."""

    def grants_settling(self, now: datetime) -> bool:
        """Whether a refused permission may be a grant still propagating: within grants_settle_seconds of the
        deploy (never where nothing deployed)."""
        return self.deployed_at is not None and now - self.deployed_at < timedelta(seconds=self.grants_settle_seconds)

    @property
    def requests_topic_path(self) -> str:
        return f"projects/{self.project}/topics/{self.requests_topic}"

    @property
    def job_regions(self) -> tuple[str, ...]:
        """Regions Landfall's jobs may run in, as configured: the default region and every region with an
        artifacts bucket (LANDFALL_ARTIFACT_BUCKETS; a deployment lists each --job-region there)."""
        return tuple(dict.fromkeys((self.default_region, *(region for region, _ in self.artifact_buckets))))

    def service_account_for(self, team: str) -> str:
        """The email a job of `team` ("" none) runs as: the team's own account where the deployment gives teams
        theirs, else the training account ("" = Vertex's default identity)."""
        if team and self.team_service_account:
            from deploy.teams import team_account_id

            return self.team_service_account.replace("{team}", team_account_id(team))
        return self.training_service_account

    def trainer_image_for(self, region: str, build: str = "") -> str:
        """The image a job in region runs: Landfall's trainer image (the named build, else the default one) from
        that region's repository when region is a job region (`landfall deploy` pushes each to every job region, so
        that no job pulls across regions), else as configured."""
        image = self.trainer_image
        if build:
            image = dict(self.trainer_images).get(build) or trainer_image().as_build(
                image, trainer_image().build_named(build)
            )
        if region in self.job_regions:
            return trainer_image().in_region(image, region)
        return image

    @property
    def run_results_topic_path(self) -> str:
        return f"projects/{self.project}/topics/{self.run_results_topic}"


PREBUILT_TRAINING_IMAGE_PREFIXES = (
    "us-docker.pkg.dev/vertex-ai/training/",
    "europe-docker.pkg.dev/vertex-ai/training/",
    "asia-docker.pkg.dev/vertex-ai/training/",
)
"""Where Vertex AI's prebuilt training containers live, one Artifact Registry repository per multi-region
(https://cloud.google.com/vertex-ai/docs/training/pre-built-containers)."""


def default_image_prefixes(trainer_image: str) -> tuple[str, ...]:
    """The deployment's own repository (the trainer image's URI up to its repository) and Vertex's prebuilt ones."""
    parts = trainer_image.split("/")
    own = "/".join(parts[:3]) + "/" if len(parts) >= 4 else ""
    return tuple(p for p in (own, *PREBUILT_TRAINING_IMAGE_PREFIXES) if p)


def _image_places(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated list of image places (HOST/PATH/ or HOST/PATH/NAME), each checked."""
    places = tuple(p.strip() for p in env.get(name, "").split(",") if p.strip())
    for place in places:
        try:
            parse_image_place(place, name)
        except SchemaError as exc:
            raise SettingsError(str(exc)) from exc
    return places


def _deployed_at(env: Mapping[str, str]) -> datetime | None:
    raw = env.get("LANDFALL_DEPLOYED_AT", "").strip()
    if not raw:
        return None
    try:
        return parse_timestamp(raw, field="LANDFALL_DEPLOYED_AT")
    except SchemaError as exc:
        raise SettingsError(
            f"LANDFALL_DEPLOYED_AT must be an RFC 3339 time (what `landfall deploy` sets), got {raw!r}; unset it"
        ) from exc


def settings_from_env(env: Mapping[str, str]) -> Settings:
    topology = load_topology()

    def need(name: str, default: str | None = None) -> str:
        value = env.get(name, default)
        if not value:
            raise SettingsError(
                f"environment variable {name} is not set; the local stack writes it to "
                ".landfall/env (`landfall up`), a deployment sets it on the function."
            )
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

    image = env.get("LANDFALL_TRAINER_IMAGE") or trainer_image_uri(
        need("GOOGLE_CLOUD_PROJECT"), env.get("LANDFALL_DEFAULT_REGION", topology.default_region)
    )
    prefixes = _image_places(env, "LANDFALL_ALLOWED_IMAGE_PREFIXES")
    return Settings(
        project=need("GOOGLE_CLOUD_PROJECT"),
        landing_bucket=landing,
        dataset_prefix=env.get("LANDFALL_DATASET_PREFIX", topology.dataset_prefix),
        output_bucket=output,
        runs_prefix=topology.runs_prefix,
        runs_collection=env.get("LANDFALL_RUNS_COLLECTION", topology.runs_collection),
        datasets_collection=env.get("LANDFALL_DATASETS_COLLECTION", topology.datasets_collection),
        dataset_versions_collection=env.get(
            "LANDFALL_DATASET_VERSIONS_COLLECTION", topology.dataset_versions_collection
        ),
        orphans_collection=env.get("LANDFALL_ORPHANS_COLLECTION", topology.orphans_collection),
        requests_topic=env.get("LANDFALL_REQUESTS_TOPIC", topology.requests_topic),
        run_results_topic=env.get("LANDFALL_RUN_RESULTS_TOPIC", topology.run_results_topic),
        default_region=env.get("LANDFALL_DEFAULT_REGION", topology.default_region),
        allowed_buckets=allowed,
        vertex_endpoint=env.get("LANDFALL_VERTEX_ENDPOINT", ""),
        trainer_package_uri=env.get("LANDFALL_TRAINER_PACKAGE_URI", f"gs://{output}/landfall/trainer-0.1.0.tar.gz"),
        executor_image_gpu=env.get(
            "LANDFALL_EXECUTOR_IMAGE_GPU", "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"
        ),
        executor_image_cpu=env.get(
            "LANDFALL_EXECUTOR_IMAGE_CPU", "us-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-4.py310:latest"
        ),
        submission_lease_seconds=positive("LANDFALL_SUBMISSION_LEASE_SECONDS", 120),
        ingest_lease_seconds=positive("LANDFALL_INGEST_LEASE_SECONDS", 60),
        max_job_attempts=positive("LANDFALL_MAX_JOB_ATTEMPTS", 3, upper=20),
        wait_backoff_seconds=positive("LANDFALL_WAIT_BACKOFF_SECONDS", 60),
        wait_give_up_seconds=positive("LANDFALL_WAIT_GIVE_UP_SECONDS", 86_400, upper=30 * 86_400),
        timeout_extensions=positive("LANDFALL_TIMEOUT_EXTENSIONS", 8, upper=JOBS_KEPT),
        long_wait_seconds=positive("LANDFALL_LONG_WAIT_SECONDS", 900),
        reconcile_grace_seconds=positive("LANDFALL_RECONCILE_GRACE_SECONDS", 60),
        deployed_at=_deployed_at(env),
        grants_settle_seconds=positive("LANDFALL_GRANTS_SETTLE_SECONDS", GRANTS_SETTLE_SECONDS, upper=86_400),
        cancel_orphans=env.get("LANDFALL_CANCEL_ORPHANS", "").strip().lower() in ("1", "true", "yes"),
        republish_grace_seconds=positive("LANDFALL_REPUBLISH_GRACE_SECONDS", 600),
        list_page_size=positive("LANDFALL_LIST_PAGE_SIZE", 1000, upper=1000),
        routes_file=env.get("LANDFALL_ROUTES_FILE", ""),
        storage_emulator_host=env.get("STORAGE_EMULATOR_HOST", ""),
        pubsub_emulator_host=env.get("PUBSUB_EMULATOR_HOST", ""),
        trainer_image=image,
        trainer_images=_trainer_images(env.get("LANDFALL_TRAINER_IMAGES", "")),
        code_bucket=env.get("LANDFALL_CODE_BUCKET") or topology.code_bucket,
        allowed_image_prefixes=prefixes or default_image_prefixes(image),
        command_image_prefixes=_image_places(env, "LANDFALL_COMMAND_IMAGE_PREFIXES"),
        training_service_account=env.get("LANDFALL_TRAINING_SERVICE_ACCOUNT", ""),
        team_service_account=_team_account(env),
        artifact_buckets=_region_buckets(env.get("LANDFALL_ARTIFACT_BUCKETS", "")),
        quota_overrides=_quota_overrides(env),
        reservations=_reservations(env.get("LANDFALL_RESERVATIONS", "")),
        memory_margin=_fraction(env, "LANDFALL_MEMORY_MARGIN", low=0.0, high=1.0, high_open=True),
        timeout_margin=_fraction(env, "LANDFALL_TIMEOUT_MARGIN", low=1.0, high=100.0),
        rate_limits_collection=env.get("LANDFALL_RATE_LIMITS_COLLECTION", topology.rate_limits_collection),
        measurements_collection=env.get("LANDFALL_MEASUREMENTS_COLLECTION", topology.measurements_collection),
        capacity_events_collection=env.get("LANDFALL_CAPACITY_EVENTS_COLLECTION", topology.capacity_events_collection),
        vertex_create_per_minute=_per_minute(env, topology.vertex_create_per_minute),
        reconciler_collection=env.get("LANDFALL_RECONCILER_COLLECTION", topology.reconciler_collection),
        reconcile_shards=positive("LANDFALL_RECONCILE_SHARDS", 1, upper=64),
        reconcile_overlap_seconds=positive("LANDFALL_RECONCILE_OVERLAP_SECONDS", 300, upper=3600),
        reconcile_full_after_seconds=positive("LANDFALL_RECONCILE_FULL_AFTER_SECONDS", 3600, upper=7 * 86_400),
        orphan_window_seconds=_orphan_window(env, positive("LANDFALL_SUBMISSION_LEASE_SECONDS", 120)),
        teams_file=env.get("LANDFALL_TEAMS_FILE", ""),
        teams_collection=env.get("LANDFALL_TEAMS_COLLECTION", topology.teams_collection),
        model_promotions_collection=env.get(
            "LANDFALL_MODEL_PROMOTIONS_COLLECTION", topology.model_promotions_collection
        ),
        canary_min_hours=_or(_fraction(env, "LANDFALL_CANARY_MIN_HOURS", low=0.0, high=10_000.0), 2.0),
        canary_margin=_or(_fraction(env, "LANDFALL_CANARY_MARGIN", low=0.0, high=10.0), 0.25),
        canary_first_runs=_switch(env, "LANDFALL_CANARY_FIRST_RUNS", default=True),
    )


def _team_account(env: Mapping[str, str]) -> str:
    """LANDFALL_TEAM_SERVICE_ACCOUNT, checked: an email template naming {team}."""
    text = env.get("LANDFALL_TEAM_SERVICE_ACCOUNT", "").strip()
    if text and ("{team}" not in text or "@" not in text):
        raise SettingsError(
            f"LANDFALL_TEAM_SERVICE_ACCOUNT={text!r} must be an email with {{team}} where the team's account id goes, "
            "e.g. {team}@my-project.iam.gserviceaccount.com (landfall deploy sets it)"
        )
    return text


def _switch(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    """An on/off setting: 1, true, yes or on; 0, false, no or off; unset or empty: `default`."""
    text = env.get(name, "").strip().lower()
    if not text:
        return default
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name}={env[name]!r} must be 1 or 0 (true/false, yes/no, on/off)")


def _orphan_window(env: Mapping[str, str], lease_seconds: int) -> int:
    """LANDFALL_ORPHAN_WINDOW_SECONDS (default 3600): must pass the submission lease (jobs younger than it are not
    judged), or an orphan could leave the window before any pass may judge it."""
    raw = env.get("LANDFALL_ORPHAN_WINDOW_SECONDS", "3600")
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not lease_seconds < value <= 30 * 86_400:
        raise SettingsError(
            f"LANDFALL_ORPHAN_WINDOW_SECONDS must be a whole number of seconds above LANDFALL_SUBMISSION_LEASE_SECONDS "
            f"({lease_seconds}; leave room for the reconcile interval too), at most {30 * 86_400}, got {raw!r}"
        )
    return value


def _reservations(text: str) -> str:
    """LANDFALL_RESERVATIONS normalised: a JSON object of name -> object; SettingsError naming what was expected."""
    if not text.strip():
        return ""
    example = '{"my-h100s": {"machine_type": "a3-highgpu-8g", "zone": "us-central1-a", "count": 2}}'
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SettingsError(f"LANDFALL_RESERVATIONS is not JSON ({exc}); expected e.g. {example}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise SettingsError(f"LANDFALL_RESERVATIONS must be a JSON object of name -> reservation, e.g. {example}")
    return json.dumps(data, sort_keys=True)


def _quota_overrides(env: Mapping[str, str]) -> str:
    """The override JSON, from LANDFALL_QUOTAS or the file LANDFALL_QUOTAS_FILE (not both); its shape is checked
    here, its figures by the planner's quota parser when the dispatcher first plans."""
    inline, path = env.get("LANDFALL_QUOTAS", ""), env.get("LANDFALL_QUOTAS_FILE", "")
    if inline and path:
        raise SettingsError("set LANDFALL_QUOTAS or LANDFALL_QUOTAS_FILE, not both")
    name, text = ("LANDFALL_QUOTAS", inline) if inline else ("LANDFALL_QUOTAS_FILE", path)
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise SettingsError(f"LANDFALL_QUOTAS_FILE={path!r} cannot be read: {exc.strerror or exc}") from exc
    if not text.strip():
        return ""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SettingsError(
            f"{name} is not JSON ({exc}); expected an object of regions, e.g. "
            '{"us-central1": {"gpus": {"NVIDIA_L4": {"on_demand": 8}}}}'
        ) from exc
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise SettingsError(f"{name} must be a JSON object of regions, each an object with cpus and/or gpus")
    return json.dumps(data, sort_keys=True)


def _per_minute(env: Mapping[str, str], default: int) -> int:
    """LANDFALL_VERTEX_CREATE_PER_MINUTE: a whole number from 0 (no limiter) to 100000."""
    name = "LANDFALL_VERTEX_CREATE_PER_MINUTE"
    raw = env.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= 100_000:
        raise SettingsError(
            f"{name} must be a whole number from 0 (no limiter) to 100000 CreateCustomJob calls per region and "
            f"minute, got {raw!r}; keep it under the project's Vertex AI quota (60 by default)"
        )
    return value


def _fraction(env: Mapping[str, str], name: str, *, low: float, high: float, high_open: bool = False) -> float | None:
    raw = env.get(name, "")
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (low <= value < high if high_open else low <= value <= high):
        bound = f"below {high:g}" if high_open else f"at most {high:g}"
        raise SettingsError(f"{name} must be a number from {low:g}, {bound}, got {raw!r}")
    return value


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


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


def _trainer_images(raw: str) -> tuple[tuple[str, str], ...]:
    """`trainer-cu130=URI,...` as ((build, uri), ...); an entry that is not BUILD=URI or names no build fails."""
    builds = {b.name for b in trainer_image().builds}
    pairs = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        build, _, uri = entry.partition("=")
        if build.strip() not in builds or not uri.strip():
            raise SettingsError(
                f"LANDFALL_TRAINER_IMAGES entries must be BUILD=IMAGE_URI with BUILD one of {', '.join(sorted(builds))}"
                f" (deploy/topology.toml [[trainer_image.builds]]), got {entry!r}"
            )
        pairs.append((build.strip(), uri.strip()))
    return tuple(pairs)


@cache
def get_settings() -> Settings:
    """The process's settings, read on first use (never at import time)."""
    return settings_from_env(os.environ)


FAULT_POINTS_ENV = "LANDFALL_FAULT_POINTS"


def fault_points_setting(env: Mapping[str, str] | None = None) -> str:
    """LANDFALL_FAULT_POINTS: where the fault campaign makes a function fail (functions/fault_points.py parses it);
    "" (unset) = nowhere. Apart from Settings so that a fault point costs nothing to set up and needs no project."""
    return (os.environ if env is None else env).get(FAULT_POINTS_ENV, "")


FUNCTION_TARGET_ENV = "FUNCTION_TARGET"


def function_target(env: Mapping[str, str] | None = None) -> str:
    """FUNCTION_TARGET: the entry point this instance serves, as Cloud Run functions sets it (the local stack too);
    "" outside a function's server. Apart from Settings: read when functions/main.py is imported, before anything
    else of the deployment's configuration is needed."""
    return (os.environ if env is None else env).get(FUNCTION_TARGET_ENV, "")
