"""The CustomJob the dispatcher would submit, in the two forms people hand to Vertex AI themselves.

- `rest_body(job)`: the REST body of `projects.locations.customJobs.create` (camelCase proto JSON: Durations as
  "3600s", enums by name), as `curl -d @job.json` or the API explorer take it.
- `gcloud_config(job)`: the `config.yaml` of `gcloud ai custom-jobs create --region R --display-name N
  --config FILE`: the CustomJobSpec alone (workerPoolSpecs, scheduling, serviceAccount, baseOutputDirectory);
  the display name and labels travel as flags (`gcloud_command`). gcloud sends the file as that message and Vertex
  checks it only on the server, so tests read the file back into `aiplatform_v1.CustomJobSpec` refusing unknown
  fields.

Both go through `google.cloud.aiplatform_v1.CustomJob`, the type the dispatcher's client sends, so a field the API
does not have fails here rather than in someone's shell. int64 fields (replicaCount) print as numbers, as the
documentation's examples write them (proto JSON accepts either), and maps (labels) sorted by key.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from google.protobuf import descriptor, json_format

INT64_TYPES = (
    descriptor.FieldDescriptor.TYPE_INT64,
    descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT64,
    descriptor.FieldDescriptor.TYPE_FIXED64,
    descriptor.FieldDescriptor.TYPE_SFIXED64,
)


def _normalised(data: dict[str, Any], message: descriptor.Descriptor) -> dict[str, Any]:
    """MessageToDict writes int64 as strings and maps in no set order; write the numbers as numbers and maps sorted
    by key, so the same job prints the same bytes."""
    for field in message.fields:
        key = field.json_name
        if key not in data:
            continue
        value = data[key]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            data[key] = dict(sorted(value.items()))
        elif field.type in INT64_TYPES:
            data[key] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif field.message_type is not None:
            if field.message_type.full_name.startswith("google.protobuf."):
                continue  # well-known types (Duration, Struct) have their own JSON forms
            for item in value if isinstance(value, list) else [value]:
                _normalised(item, field.message_type)
    return data


def rest_body(job: dict[str, Any]) -> dict[str, Any]:
    """The SDK dict job_spec.custom_job builds, as the REST API's JSON body of a CustomJob."""
    from google.cloud.aiplatform_v1 import CustomJob

    message = CustomJob.pb(CustomJob(job))
    return _normalised(json_format.MessageToDict(message), message.DESCRIPTOR)


def gcloud_config(body: dict[str, Any]) -> dict[str, Any]:
    """The CustomJobSpec part of a REST body: what `gcloud ai custom-jobs create --config` reads."""
    spec = body["jobSpec"]
    if not isinstance(spec, dict):
        raise ValueError(f"expected a CustomJob REST body with a jobSpec object, got jobSpec {spec!r}")
    return spec


def gcloud_command(
    body: dict[str, Any], region: str, config_file: str = "config.yaml", project: str | None = None
) -> str:
    """The gcloud command line that submits `config_file` with this job's display name and labels (in project,
    when given; else in gcloud's configured project)."""
    labels = ",".join(f"{k}={v}" for k, v in sorted(body.get("labels", {}).items()))
    words = ["gcloud", "ai", "custom-jobs", "create", f"--region={region}", f"--display-name={body['displayName']}"]
    if project:
        words.append(f"--project={project}")
    if labels:
        words.append(f"--labels={labels}")
    words.append(f"--config={config_file}")
    return shlex.join(words)


def render(body: dict[str, Any], region: str, fmt: str, project: str | None = None) -> str:
    """`json`: the REST body; `yaml`: the gcloud config.yaml, headed by the command that submits it (with
    --project when project is given: the job as that project's deployed dispatcher would submit it)."""
    if fmt == "json":
        return json.dumps(body, indent=2) + "\n"
    import yaml

    origin = (
        f"\n# As the dispatcher deployed in {project} would submit it (settings `landfall deploy` recorded)."
        if project
        else ""
    )
    head = (
        "# Vertex AI CustomJobSpec for `gcloud ai custom-jobs create --config` (written by landfall plan "
        f"--custom-job).{origin}\n# Submit it with:\n#   " + gcloud_command(body, region, project=project) + "\n"
    )
    return head + yaml.safe_dump(gcloud_config(body), sort_keys=False, default_flow_style=False)
