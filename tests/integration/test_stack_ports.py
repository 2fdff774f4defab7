"""The port check of `landfall up`: a port whose old connections linger in TIME-WAIT is free (every server of the
stack binds it with SO_REUSEADDR), a port a socket listens on is not."""

from __future__ import annotations

import errno
import socket
import subprocess

import pytest

from deploy.local import processes


def _time_wait_port() -> int:
    """A port on which a server accepted a connection and closed it first: its side now sits in TIME-WAIT."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = int(server.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            accepted.close()  # the server closes first, as a stopped server's sockets do
            client.recv(1)  # its FIN arrived
    return port


def test_a_port_in_time_wait_is_free_for_the_next_up() -> None:
    port = _time_wait_port()
    states = subprocess.run(
        ["ss", "-Htan", "state", "time-wait", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout
    assert states.strip(), f"no TIME-WAIT connection on {port}: the test did not set up what it means to check"
    with socket.socket() as plain, pytest.raises(OSError) as refused:
        plain.bind(("127.0.0.1", port))  # what the check did before: it called such a port taken
    assert refused.value.errno == errno.EADDRINUSE
    assert processes.port_is_free(port)


def test_a_port_a_server_listens_on_is_not_free() -> None:
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert not processes.port_is_free(server.getsockname()[1])
