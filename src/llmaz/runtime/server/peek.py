"""A connection's first bytes, looked at without being read: whether a whole first message has arrived (a request
head in plain HTTP, the first TLS record in TLS), and whether the peer has sent bytes the event loop has not read.

The listener hands a connection to the HTTP server only once its first message is whole, and a draining server
closes only connections with nothing waiting; both need to see the peer's bytes while leaving them to the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

PEEK_BYTES = 16 * 1024 + 5  # the largest TLS record, with its header
_POLL_INTERVAL = 0.05  # where the kernel cannot wake us on more bytes (no SO_RCVLOWAT)


def bytes_waiting(transport: asyncio.BaseTransport) -> bool:
    """Whether the kernel holds bytes from the peer that the event loop has not read yet (a request on its way)."""
    inner = transport.get_extra_info("socket")
    if inner is None:
        return False
    # A socket object over the same descriptor, detached afterwards: the transport's own one refuses recv().
    sock = socket.socket(inner.family, inner.type, inner.proto, fileno=inner.fileno())
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:  # nothing waiting (EAGAIN), or the connection is already gone
        return False
    finally:
        sock.detach()


def tls_record_complete(data: bytes) -> bool:
    """A whole first TLS record; or bytes that are no TLS handshake at all, which the handshake refuses at once."""
    if data[:1] != b"\x16":
        return True
    return len(data) >= 5 and len(data) >= 5 + int.from_bytes(data[3:5], "big")


def http_head_complete(data: bytes) -> bool:
    return b"\r\n\r\n" in data or b"\n\n" in data


async def first_message(sock: socket.socket, complete: Callable[[bytes], bool]) -> None:
    """Wait until the bytes waiting on `sock` are `complete` (or PEEK_BYTES long), without consuming them.

    The kernel wakes us only when more bytes than already seen have arrived (SO_RCVLOWAT), or the peer closed.
    """
    seen = 0
    wake_on_more = hasattr(socket, "SO_RCVLOWAT")
    try:
        while True:
            if seen and not wake_on_more:
                await asyncio.sleep(_POLL_INTERVAL)
            else:
                await _readable(sock)
            try:
                data = sock.recv(PEEK_BYTES, socket.MSG_PEEK)
            except BlockingIOError:
                continue
            if not data or (wake_on_more and len(data) <= seen):
                raise ConnectionResetError("closed before sending a whole first message")
            if complete(data) or len(data) >= PEEK_BYTES:
                return
            seen = len(data)
            if wake_on_more:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, seen + 1)
                except OSError:
                    wake_on_more = False
    finally:
        if seen and wake_on_more:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)


async def _readable(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    fd = sock.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
