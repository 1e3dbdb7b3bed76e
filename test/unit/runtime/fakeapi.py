"""A stand-in API server for one custom resource, for tests of what the runtime does with a resource not served.

`FakeApi` serves `/apis/example.com/v1/widgets` (list and watch, cluster-wide): 404 with a NotFound Status until
`served` is set, then a list of `items` at resourceVersion "5" and a watch that stays open without events. It
records the query of every request.

Limits: one resource; no namespaces, paging, resourceVersion semantics or watch events; nothing else is served
(any other path is aiohttp's plain 404).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from llmaz.runtime.resource import Resource

WIDGETS = Resource("example.com", "v1", "widgets", "Widget", namespaced=False)
NOT_FOUND = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "the server could not find the requested resource",
    "reason": "NotFound",
    "details": {},
    "code": 404,
}


class FakeApi:
    def __init__(self, items: list[dict[str, Any]] | None = None) -> None:
        self.served = False
        self.items = items or []
        self.queries: list[dict[str, str]] = []
        self.url = ""
        self._stop = asyncio.Event()

    def lists(self) -> int:
        return sum(1 for query in self.queries if "watch" not in query)

    async def _widgets(self, request: web.Request) -> web.StreamResponse:
        self.queries.append(dict(request.query))
        if not self.served:
            return web.json_response(NOT_FOUND, status=404)
        if "watch" not in request.query:
            return web.json_response({"kind": "WidgetList", "metadata": {"resourceVersion": "5"}, "items": self.items})
        response = web.StreamResponse()
        await response.prepare(request)
        await self._stop.wait()
        return response

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FakeApi]:
        app = web.Application()
        app.router.add_get("/apis/example.com/v1/widgets", self._widgets)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            yield self
        finally:
            self._stop.set()
            await runner.cleanup()
