"""A local imitation of Vertex AI's JobService for custom training jobs.

Start it with `python -m deploy.vertex_emulator --help`. It serves the real gRPC service
`google.cloud.aiplatform.v1.JobService`, runs every replica of a CustomJob as a local process with the
environment Vertex gives it, keeps the job table on disk and publishes the job's service log lines to a
Pub/Sub topic as Cloud Logging entries. What it does not imitate is listed in docs/vertex_emulator.md.

Importing this package is cheap: gRPC and the Google clients load only when the server starts.
"""

from deploy.vertex_emulator.logs import replica_log_paths

__all__ = ["replica_log_paths"]
