"""/healthz (liveness) and /readyz (readiness) probes with named checks, served by aiohttp.

Responses follow controller-runtime's healthz handler: 200 "ok" when every check passes; otherwise 500 with a
listing of "[+]name ok" / "[-]name failed: reason withheld" lines (the error itself is logged, never served).
`?verbose` forces the listing, `?exclude=name` (repeatable) skips checks, `/healthz/<name>` runs one check.
A check is a sync or async callable that raises (or returns False) when unhealthy.

The bind address takes an IPv6 host in brackets (`[::1]:8081`); an empty host (`:8081`) or `[::]` listens on
every interface, IPv4 and IPv6. A connection must deliver each request head within `read_timeout` (default
`READ_TIMEOUT`), and an idle keep-alive connection is closed after as long; connections are bounded
(`MAX_CONNECTIONS`, `MAX_SERVED`, see `llmaz.runtime.server.listener`).

A check that raises `CheckFailed` chooses to say why: its message is served in place of "reason withheld"
("[-]informers failed: resource ... is not served by the API server; fix: ..."), so whoever reads /readyz learns
what to fix. Only messages written for that are served; any other exception stays withheld.

A check's failure is logged (info) when it starts failing or its reason changes, and again when it passes, not at
every probe: a kubelet probing every few seconds would otherwise repeat the same line for as long as it lasts.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from aiohttp import web

from llmaz.runtime.log import bounded, get_logger
from llmaz.runtime.runnable import until_cancelled
from llmaz.runtime.server.address import split_host_port
from llmaz.runtime.server.listener import ConnectionLimits, Connections, serving

Check = Callable[[], bool | Awaitable[bool | None] | None]

DEFAULT_BIND_ADDRESS = ":8081"
READ_TIMEOUT = 10.0
# kubelet opens one connection per probe, a few per minute.
MAX_CONNECTIONS, MAX_SERVED = 256, 32

WITHHELD = "reason withheld"


class CheckFailed(Exception):  # noqa: N818 (a check's outcome, named like the probe line it becomes)
    """Raised by a check to fail with a reason the probe endpoints serve: say what is wrong and how to fix it,
    never anything secret."""


class Checker:
    """One endpoint's named checks, run in registration order."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._checks: dict[str, Check] = {}
        self._failing: dict[str, str] = {}
        self._log = get_logger("llmaz.runtime.server.healthz").bind(endpoint=endpoint)

    def add(self, name: str, check: Check) -> None:
        if name in self._checks:
            raise ValueError(f"{self.endpoint} check {name!r} already registered")
        self._checks[name] = check

    @property
    def names(self) -> list[str]:
        return list(self._checks)

    async def run(self, only: str | None = None, exclude: frozenset[str] = frozenset()) -> list[tuple[str, bool]]:
        """(name, passed) per check; `only` restricts to one check (KeyError if unknown)."""
        return [(name, reason is None) for name, reason in await self.reasons(only, exclude)]

    async def reasons(
        self, only: str | None = None, exclude: frozenset[str] = frozenset()
    ) -> list[tuple[str, str | None]]:
        """(name, None when it passed, else the reason it may serve) per check; `only` restricts to one check."""
        names = [only] if only is not None else [n for n in self._checks if n not in exclude]
        return [(name, await self._reason(name, self._checks[name])) for name in names]

    async def _reason(self, name: str, check: Check) -> str | None:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            raise
        except CheckFailed as exc:
            return self._failed(name, str(exc) or WITHHELD, str(exc))
        except Exception as exc:
            return self._failed(name, WITHHELD, repr(exc))
        if result is False:
            return self._failed(name, WITHHELD, "returned False")
        if self._failing.pop(name, None) is not None:
            self._log.info("check passed", check=name)
        return None

    def _failed(self, name: str, served: str, error: str) -> str:
        if self._failing.get(name) != error:
            self._failing[name] = error
            self._log.info("check failed", check=name, error=error)
        return served

    async def handle(self, request: web.Request) -> web.Response:
        only = request.match_info.get("name")
        if only is not None and only not in self._checks:
            return web.Response(status=404, text=f"no {self.endpoint} check named {bounded(repr(only))}\n")
        results = await self.reasons(only, frozenset(request.query.getall("exclude", [])))
        healthy = all(reason is None for _, reason in results)
        if healthy and "verbose" not in request.query:
            return web.Response(text="ok")
        lines = [f"[+]{n} ok" if reason is None else f"[-]{n} failed: {reason}" for n, reason in results]
        lines.append(f"{self.endpoint} check {'passed' if healthy else 'failed'}")
        return web.Response(status=200 if healthy else 500, text="\n".join(lines) + "\n")


class HealthProbeServer:
    """A Runnable serving /healthz and /readyz; a "ping" liveness check is always present."""

    needs_leader_election = False

    def __init__(self, bind_address: str = DEFAULT_BIND_ADDRESS, read_timeout: float = READ_TIMEOUT) -> None:
        self.bind_address = bind_address
        self.read_timeout = read_timeout
        self._host, self._port = split_host_port(bind_address)
        self.healthz = Checker("healthz")
        self.readyz = Checker("readyz")
        self.healthz.add("ping", lambda: None)
        self.port: int | None = None
        self._started = asyncio.Event()
        self._connections = Connections()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._connections.middleware])
        for checker in (self.healthz, self.readyz):
            app.router.add_get(f"/{checker.endpoint}", checker.handle)
            app.router.add_get(f"/{checker.endpoint}/{{name}}", checker.handle)
        return app

    async def wait_started(self) -> None:
        await self._started.wait()

    def _limits(self) -> ConnectionLimits:
        return ConnectionLimits(MAX_CONNECTIONS, MAX_SERVED, first_message_timeout=self.read_timeout)

    async def run(self) -> None:
        async with serving(
            self.app(), self._host, self._port, self._connections, limits=self._limits(),
            keepalive_timeout=self.read_timeout,
        ) as self.port:  # fmt: skip
            self._started.set()
            await until_cancelled()
