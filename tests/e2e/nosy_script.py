"""A team's training script that tries one thing with the Cloud Storage client library, as any script may: on the
local stack its job runs as the team's own account, so reading its own data and writing its own model work, and
each try at the other team's data or runs ends in Cloud Storage's 403 (tests/e2e/test_team_isolation.py).

--try own | list-other | read-other | write-other-data | write-other-model; --other gs://LANDING/PREFIX/ (the other
team's data) and --other-team NAME.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from google.cloud import storage


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--try", dest="attempt", required=True)
    parser.add_argument("--other", required=True)
    parser.add_argument("--other-team", required=True)
    args = parser.parse_args()
    client = storage.Client(project=os.environ.get("CLOUD_ML_PROJECT_ID"))
    landing, _, prefix = args.other.removeprefix("gs://").partition("/")
    artifacts = os.environ["AIP_MODEL_DIR"].removeprefix("gs://").partition("/")[0]
    if args.attempt == "own":
        rows = sum(1 for path in Path(os.environ["LANDFALL_DATA_DIR"]).rglob("*.csv") for _ in path.open())
        model = Path(os.environ["LANDFALL_MODEL_DIR"])
        model.mkdir(parents=True, exist_ok=True)
        (model / "model.txt").write_text(f"rows read: {rows}\n")
    elif args.attempt == "list-other":
        print([b.name for b in client.list_blobs(landing, prefix=prefix)])
    elif args.attempt == "read-other":
        print(client.bucket(landing).blob(prefix + "part-0.csv").download_as_bytes())
    elif args.attempt == "write-other-data":
        client.bucket(landing).blob(prefix + "planted/_SUCCESS").upload_from_string(b"")
    elif args.attempt == "write-other-model":
        client.bucket(artifacts).blob(f"runs/{args.other_team}/planted/model/model.pt").upload_from_string(b"w")
    else:
        raise SystemExit(
            f"--try {args.attempt!r}: expected own, list-other, read-other, write-other-data or write-other-model"
        )


if __name__ == "__main__":
    main()
