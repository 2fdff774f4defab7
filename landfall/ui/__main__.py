"""`python -m landfall.ui --host H --port P`: serve the dashboard (what `landfall ui` and its container run)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8090


def serve(host: str, port: int, *, announce: bool = True) -> None:
    """Build the app (a bad LANDFALL_UI_ACTIONS fails here, before the server starts) and serve it until stopped."""
    import uvicorn

    from landfall.ui.app import create_app

    app = create_app()
    if announce:
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        print(f"Landfall dashboard: http://{shown}:{port}/  (Ctrl-C stops it)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m landfall.ui", description=__doc__)
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    args = parser.parse_args(argv)
    from landfall.errors import CommandError

    try:
        serve(args.host, args.port)
    except CommandError as exc:
        print(f"landfall ui: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
