"""A TCP forwarder on a host address to whichever of its backends accepts the connection.

`make run` uses it to put the node's gateway Service on http://127.0.0.1:8000 (a ClusterIP is reachable from the
host, but a fixed loopback address is what clients are configured with), and the simulated e2e tier to give its
local manager replicas one address, as a Service gives its pods. Bytes are relayed both ways until each side has
closed; a half-close is passed on, so request/response protocols and streams both work.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import socketserver
import threading
from collections.abc import Sequence

Backend = tuple[str, int]
_CONNECT_TIMEOUT = 2.0
_IDLE_TIMEOUT = 600.0


class TcpForwarder(socketserver.ThreadingTCPServer):
    """Listens on `address` (port 0: any free port, then `.port`); `backends` may be replaced at any time."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: Backend = ("127.0.0.1", 0), backends: Sequence[Backend] = ()) -> None:
        super().__init__(address, _Relay)
        self.port: int = self.server_address[1]
        self.backends: list[Backend] = list(backends)
        self._next = 0
        self._thread = threading.Thread(target=self.serve_forever, name=f"forward-{self.port}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def __enter__(self) -> TcpForwarder:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def connect(self) -> socket.socket | None:
        """A connection to the next backend that accepts one (round-robin start), or None when none does."""
        backends = list(self.backends)
        self._next += 1
        for offset in range(len(backends)):
            with contextlib.suppress(OSError):
                return socket.create_connection(backends[(self._next + offset) % len(backends)], _CONNECT_TIMEOUT)
        return None


class _Relay(socketserver.BaseRequestHandler):
    server: TcpForwarder

    def handle(self) -> None:
        upstream = self.server.connect()
        if upstream is None:
            return  # no backend: the connection is closed, as a Service without endpoints refuses it
        with upstream, selectors.DefaultSelector() as selector:
            pairs = {self.request: upstream, upstream: self.request}
            for sock in pairs:
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ)
            while selector.get_map():
                events = selector.select(timeout=_IDLE_TIMEOUT)
                if not events:
                    return  # idle past the bound on both sides
                for key, _ in events:
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = source.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        selector.unregister(source)
                        with contextlib.suppress(OSError):
                            pairs[source].shutdown(socket.SHUT_WR)
                        continue
                    pairs[source].setblocking(True)
                    try:
                        pairs[source].sendall(data)
                    except OSError:
                        return  # the other side is gone
                    pairs[source].setblocking(False)
