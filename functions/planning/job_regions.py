"""The deployment's job regions as the planner keeps to them: a job runs only where Landfall deployed an artifacts
bucket (its checkpoints and model stay there) and an image repository (its image is pulled there), so no plan,
fallback or canary leaves them. A request that allows none of them is refused with the command that deploys one."""

from __future__ import annotations

import shlex


def undeployed_rejection(
    allowed: tuple[str, ...],
    job_regions: tuple[str, ...],
    *,
    catalog_regions: tuple[str, ...],
    default_region: str,
    project: str,
) -> str | None:
    """Why a request whose constraints.regions name no job region cannot be planned, with the deploy command that
    adds the catalog's regions among them (naming every job region deployed now besides the default one, so that
    they stay); None when it may run somewhere (it names none, one is deployed, or the planner is told of no
    deployment) or names no region the catalog knows (the planner's own rejection says so)."""
    deployable = [r for r in allowed if r in catalog_regions]
    if not deployable or not job_regions or set(allowed) & set(job_regions):
        return None
    keep = [r for r in job_regions if r != default_region]
    words = ["landfall", "deploy", "--project", project or "PROJECT", "--region", default_region]
    for region in dict.fromkeys((*keep, *deployable)):
        words += ["--job-region", region]
    return (
        f"constraints.regions allows only {', '.join(allowed)}, and this deployment has an artifacts bucket and an "
        f"image repository (where a job writes its checkpoints and model, and pulls its image) only in "
        f"{', '.join(job_regions)}: no job runs in a region without them. Deploy the region: `{shlex.join(words)}`, "
        "or allow a deployed region in constraints.regions"
    )
