"""How the manager's HTTP servers take connections: bounded in number, handed over only once they speak.

asyncio gives every TLS connection 256 KiB of buffers the moment it is accepted, and every connection's reads
come in chunks of up to 256 KiB, so a crowd of connections (stalled ones included) could fill a pod's memory
before any request deadline applies. `ListenerSite` therefore accepts in two stages:

1. Accepted: at most `max_connections` sockets (a few KiB each) wait, without being read, until the peer has
   sent a whole first message (a request head in plain HTTP, the first TLS record, i.e. the ClientHello, in
   TLS). Beyond that bound the kernel's listen backlog holds new connections.
2. Served: at most `max_served` connections are handed to the HTTP server (TLS set up; decrypted bytes read
   ahead capped at `tls_read_buffer`). A connection waits in stage 1 for a free slot. While any waits, the
   server's responses close their connections, and keep-alive connections idle since a response at least
   `IDLE_GRACE` ago (nothing received since) are closed, so that slots pass on (`Connections`, whose
   middleware the served app must have).

Invariants: stage 1, including the wait for a slot, takes at most `first_message_timeout`, and a TLS handshake
at most as long again; a connection that takes longer is closed. Slots are released when a connection closes,
whatever closes it. The peer's bytes are only peeked at in stage 1, so the server reads them as sent.

Stopping (`Connections.drain`, before the runner's cleanup): an HTTP/1.1 server that closes a keep-alive connection
between requests races its client, which may be sending the next request on it; that request is lost, and a client
does not resend a POST (the API server reports the webhook call failed with `EOF`). So a draining server answers
every request with `Connection: close`, which the client sees before it reuses the connection, and closes a
connection itself only once it has been quiet for `IDLE_GRACE` with no byte of a next request read or waiting in
the kernel's buffer: a client that keeps its most recently used connections first (Go's does) has long stopped
picking it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from llmaz.runtime.log import get_logger
from llmaz.runtime.runnable import grace_remains
from llmaz.runtime.server.address import bind_socket
from llmaz.runtime.server.peek import bytes_waiting, first_message, http_head_complete, tls_record_complete

# A keep-alive connection quiet this long after a response is idle. Longer than the event loop is ever blocked
# (judging one review takes well under a second), so a request's bytes waiting to be read are seen first.
IDLE_GRACE = 2.0
_ACCEPT_RETRY_DELAY = 1.0  # after accept fails (e.g. out of file descriptors), as asyncio's own servers wait
# How long a stopping server drains at most: quiet connections go after IDLE_GRACE, busy ones with their response.
DRAIN_TIMEOUT = 5.0
_DRAIN_POLL = 0.1  # how often a draining server looks for connections that have gone quiet
_log = get_logger("llmaz.runtime.server.listener")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _DropClientErrors(logging.Filter):
    """aiohttp logs every malformed request, a client's fault it answers with a 400, as an error with a traceback
    quoting the request: noise in the log, and as much of it as a client cares to send."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], HttpProcessingError))


HTTP_LOG = logging.getLogger("llmaz.runtime.http")
"""The logger to give aiohttp's runners (`logger=`): failures of the server itself, without client errors."""
HTTP_LOG.addFilter(_DropClientErrors())


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int = 1024
    max_served: int = 64
    first_message_timeout: float = 10.0
    tls_read_buffer: int = 16 * 1024

    def __post_init__(self) -> None:
        if not 1 <= self.max_served <= self.max_connections:
            raise ValueError("need 1 <= max_served <= max_connections")
        if self.first_message_timeout <= 0:
            raise ValueError("first_message_timeout must be positive")


class Connections:
    """The served connections of a site, and how many wait for a slot; the app's `middleware` tracks requests."""

    def __init__(self) -> None:
        self.waiting = 0
        self.draining = False
        self.served: dict[asyncio.BaseTransport, _Connection] = {}

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        connection = self.served.get(request.transport) if request.transport is not None else None
        if connection is not None:
            connection.requests += 1
        try:
            response = await handler(request)
        finally:
            if connection is not None:
                connection.answered()
        if self.waiting or self.draining:
            response.force_close()
        return response

    def close_idle(self) -> None:
        """Close the served connections idle since a response IDLE_GRACE ago (see the module doc)."""
        quiet_since = asyncio.get_running_loop().time() - IDLE_GRACE
        for transport, connection in list(self.served.items()):
            if connection.idle_since(quiet_since):
                transport.close()

    async def drain(self, within: float = DRAIN_TIMEOUT, quiet: float = IDLE_GRACE) -> None:
        """Hand every served connection back (see the module doc); returns once none is left, or after `within`
        seconds. From then on responses close their connections; the runner's cleanup closes what is left."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while self.served and loop.time() < deadline:
            quiet_since = loop.time() - quiet
            for transport, connection in list(self.served.items()):
                if connection.quiet_since(quiet_since) and not bytes_waiting(transport):
                    transport.close()
            await asyncio.sleep(_DRAIN_POLL)


class ListenerSite(web.BaseSite):
    """A site serving `runner`'s HTTP server on a bound socket, through the two stages of the module doc."""

    __slots__ = ("_accepting", "_connections", "_held", "_limits", "_name", "_opening", "_served", "_slots", "_sock")

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        *,
        ssl_context: ssl.SSLContext | None = None,
        limits: ConnectionLimits | None = None,
        connections: Connections | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._sock = sock
        self._limits = limits or ConnectionLimits()
        self._connections = connections or Connections()
        host, port = sock.getsockname()[:2]
        self._name = f"{'https' if ssl_context else 'http'}://{f'[{host}]' if ':' in host else host}:{port}"
        self._slots = asyncio.Semaphore(self._limits.max_connections)
        self._held = 0
        self._served = asyncio.Semaphore(self._limits.max_served)
        self._accepting: asyncio.Task[None] | None = None
        self._opening: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self._name

    @property
    def held(self) -> int:
        """Connections this site holds now, waiting for their first message or served: at most `max_connections`."""
        return self._held

    async def start(self) -> None:
        await super().start()  # registers the site, so that runner.cleanup() stops it
        self._sock.listen(128)
        self._accepting = asyncio.create_task(self._accept())

    async def stop(self) -> None:
        tasks = [t for t in (self._accepting, *self._opening) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._sock.close()
        await super().stop()

    async def _accept(self) -> None:
        while True:
            await self._slots.acquire()
            try:
                conn = await self._next_connection()
            except OSError as exc:
                self._slots.release()
                _log.warning("accepting a connection failed", site=self._name, error=repr(exc))
                await asyncio.sleep(_ACCEPT_RETRY_DELAY)
                continue
            except BaseException:
                self._slots.release()
                raise
            self._held += 1
            slots = _Slots(self)
            task = asyncio.create_task(self._open(conn, slots))
            self._opening.add(task)
            task.add_done_callback(functools.partial(self._opened, conn, slots))

    def _opened(self, conn: socket.socket, slots: _Slots, task: asyncio.Task[None]) -> None:
        self._opening.discard(task)
        if task.cancelled():  # the site stopped, perhaps before the task ever ran: nothing else closes it
            slots.release()
            conn.close()

    async def _next_connection(self) -> socket.socket:
        """Accept one connection. Unlike `loop.sock_accept`, a cancellation can never come after the kernel handed
        over a connection (which would then be open, unserved and unclosed): the accept itself is synchronous."""
        loop = asyncio.get_running_loop()
        fd = self._sock.fileno()
        while True:
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                pass
            else:
                conn.setblocking(False)
                return conn
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, _resolve, readable)
            try:
                await readable
            finally:
                loop.remove_reader(fd)

    async def _open(self, conn: socket.socket, slots: _Slots) -> None:
        timeout = self._limits.first_message_timeout
        tls = self._ssl_context is not None
        try:
            async with asyncio.timeout(timeout):
                await first_message(conn, tls_record_complete if tls else http_head_complete)
                await self._take_served_slot()
                slots.served = True
            server = self._runner.server
            assert server is not None
            limit = self._limits.tls_read_buffer
            connections = self._connections
            # The shutdown timeout too: a peer that never answers our close_notify would hold its slot 30 s.
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: _Connection(server(), connections, slots.release, limit),
                conn,
                ssl=self._ssl_context,
                ssl_handshake_timeout=timeout if tls else None,
                ssl_shutdown_timeout=timeout if tls else None,
            )
        except Exception as exc:  # the peer was too slow, went away, or failed its handshake
            slots.release()
            conn.close()
            _log.debug("connection not served", site=self._name, error=repr(exc))

    async def _take_served_slot(self) -> None:
        """Wait for a served slot, closing idle connections to free one (checked again every IDLE_GRACE)."""
        self._connections.waiting += 1
        try:
            while True:
                if self._served.locked():
                    self._connections.close_idle()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(IDLE_GRACE):
                        await self._served.acquire()
                        return
        finally:
            self._connections.waiting -= 1


async def start_site(
    runner: web.BaseRunner,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    limits: ConnectionLimits | None = None,
    connections: Connections | None = None,
) -> int:
    """Serve `runner` on `host`:`port` (stopped by `runner.cleanup()`); returns the bound port.

    Pass the `Connections` whose middleware the runner's app has, so that slots pass on when contended.
    """
    sock = bind_socket(host, port)
    try:
        site = ListenerSite(runner, sock, ssl_context=ssl_context, limits=limits, connections=connections)
        await site.start()
    except BaseException:
        sock.close()
        raise
    bound: int = sock.getsockname()[1]
    return bound


async def stop_accepting(runner: web.BaseRunner) -> None:
    """Stop every site of `runner`: nothing new is accepted (a connection still waiting for its first message is
    closed); the served connections stay, for `Connections.drain` and the runner's cleanup."""
    for site in list(runner.sites):
        await site.stop()


@contextlib.asynccontextmanager
async def serving(
    app: web.Application,
    host: str,
    port: int,
    connections: Connections,
    *,
    ssl_context: ssl.SSLContext | None = None,
    limits: ConnectionLimits | None = None,
    **runner_options: Any,
) -> AsyncIterator[int]:
    """`app` served on `host`:`port` through a `ListenerSite` for the block, which gets the bound port. When the
    block ends normally or by the runnable's stop (its first cancellation, see `runnable`), the connections are
    drained first (`Connections.drain`, so no request is lost to a close), then the server stops; `connections`
    must be the one whose middleware `app` has. `runner_options` go to aiohttp's `AppRunner` (`keepalive_timeout`,
    `shutdown_timeout`, ...)."""
    runner = web.AppRunner(app, access_log=None, logger=HTTP_LOG, **runner_options)
    await runner.setup()
    try:
        bound = await start_site(runner, host, port, ssl_context=ssl_context, limits=limits, connections=connections)
        try:
            yield bound
        except asyncio.CancelledError:
            if grace_remains():
                await connections.drain()
            raise
        await connections.drain()
    finally:
        await runner.cleanup()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # cancelled, by a stop, in the turn the readiness was seen
        future.set_result(None)


class _Slots:
    """The slots one accepted connection holds in its site: released once, whatever ends the connection."""

    __slots__ = ("_held", "_site", "served")

    def __init__(self, site: ListenerSite) -> None:
        self._site = site
        self._held = True
        self.served = False  # a served slot is taken as well

    def release(self) -> None:
        if self.served:
            self.served = False
            self._site._served.release()
        if self._held:
            self._held = False
            self._site._held -= 1
            self._site._slots.release()


class _Connection(asyncio.Protocol):
    """The HTTP server's protocol for one connection, registered while open; its slots are released on close."""

    def __init__(
        self, inner: asyncio.Protocol, registry: Connections, on_lost: Callable[[], None], tls_read_buffer: int
    ) -> None:
        self._inner = inner
        self._registry = registry
        self._on_lost = on_lost
        self._tls_read_buffer = tls_read_buffer
        self._transport: asyncio.BaseTransport | None = None
        self.requests = 0  # being handled now
        self._answered = False  # at least one request was
        self._quiet_from = asyncio.get_running_loop().time()  # the last response, or the opening before one
        self._received_since = False  # bytes arrived after it: the next request, or the rest of a refused body

    def answered(self) -> None:
        self.requests -= 1
        self._answered = True
        self._quiet_from = asyncio.get_running_loop().time()
        self._received_since = False

    def quiet_since(self, time: float) -> bool:
        """No request in hand, and nothing received since the last response (or the opening) at `time` or before."""
        return self.requests == 0 and not self._received_since and self._quiet_from <= time

    def idle_since(self, time: float) -> bool:
        """Quiet since `time`, between requests after at least one."""
        return self._answered and self.quiet_since(time)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # TLS transports read ahead up to 256 KiB of decrypted bytes per connection unless told otherwise.
        set_limits = getattr(transport, "set_read_buffer_limits", None)
        if set_limits is not None:
            set_limits(high=self._tls_read_buffer)
        self._transport = transport
        self._registry.served[transport] = self
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self._inner.connection_lost(exc)
        finally:
            if self._transport is not None:
                self._registry.served.pop(self._transport, None)
            self._on_lost()

    def data_received(self, data: bytes) -> None:
        self._received_since = True
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()
