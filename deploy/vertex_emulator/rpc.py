"""What every service of the emulator shares: the error answered with a gRPC status, and reading a parent name."""

from __future__ import annotations

import grpc


class RpcError(Exception):
    """An error answered to the client with a gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def parse_parent(parent: str) -> tuple[str, str]:
    """(project, location) of `projects/{project}/locations/{location}`; INVALID_ARGUMENT otherwise."""
    parts = parent.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != "locations" or not parts[1] or not parts[3]:
        raise RpcError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f'Invalid parent "{parent}": expected "projects/{{project}}/locations/{{location}}".',
        )
    return parts[1], parts[3]
