"""The TCP forwarder: bytes both ways, half-closes passed on, dead backends skipped, no backend means closed."""

from __future__ import annotations

import errno
import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from llmaz_dev.envtest.forward import TcpForwarder


class _Upper(socketserver.StreamRequestHandler):
    """Answers with the whole request upper-cased, after the client has half-closed."""

    def handle(self) -> None:
        self.wfile.write(self.rfile.read().upper())


@pytest.fixture
def backend() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Upper)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield ("127.0.0.1", server.server_address[1])
    server.shutdown()
    server.server_close()


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _exchange(port: int, payload: bytes) -> bytes:
    """What comes back for `payload`; a connection the forwarder closed (a reset when data was unread) gives b""."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        try:
            client.sendall(payload)
            client.shutdown(socket.SHUT_WR)  # the backend answers only after this reaches it
            while chunk := client.recv(65536):
                received += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass
        except OSError as error:
            if error.errno != errno.ENOTCONN:
                raise
    return received


def test_bytes_flow_both_ways_and_a_half_close_reaches_the_backend(backend: tuple[str, int]) -> None:
    payload = b"data: hello\n\n" * 20_000  # larger than any one socket buffer
    with TcpForwarder(backends=[backend]) as forwarder:
        assert _exchange(forwarder.port, payload) == payload.upper()


def test_a_backend_that_refuses_is_skipped(backend: tuple[str, int]) -> None:
    with TcpForwarder(backends=[("127.0.0.1", _dead_port()), backend]) as forwarder:
        for _ in range(3):  # whichever the round-robin starts with
            assert _exchange(forwarder.port, b"ping") == b"PING"


def test_without_a_backend_the_connection_is_closed_unanswered() -> None:
    with TcpForwarder(backends=[("127.0.0.1", _dead_port())]) as forwarder:
        assert _exchange(forwarder.port, b"ping") == b""


def test_backends_can_be_replaced_while_it_runs(backend: tuple[str, int]) -> None:
    with TcpForwarder() as forwarder:
        assert _exchange(forwarder.port, b"ping") == b""
        forwarder.backends = [backend]
        assert _exchange(forwarder.port, b"ping") == b"PING"
