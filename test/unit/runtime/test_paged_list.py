"""The first list of an informer is paged, and transformed page by page, so a large list is never held whole."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from llmaz.runtime.cache.informer import ClientListWatch, SharedInformer
from llmaz.runtime.client import Client, RestConfig
from llmaz_dev.testing.runnables import started

from .fakeapi import WIDGETS

NAMES = ["a", "b", "c", "d", "e"]


@asynccontextmanager
async def paging_api(log: list[str]) -> AsyncIterator[str]:
    """Lists the widgets NAMES, in pages of at most 2 when a limit is asked, with a continue token (the index of
    the next); a watch stays open without events."""

    async def widgets(request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        if "watch" in query:  # stays open, without events, until the server stops
            response = web.StreamResponse()
            await response.prepare(request)
            await stopped.wait()
            return response
        log.append("request " + " ".join(f"{key}={query[key]}" for key in sorted(query)))
        start = int(query.get("continue", "0"))
        # Pages of at most 2, whatever the limit above that (a server may send fewer objects than asked for).
        end = min(start + min(int(query.get("limit", len(NAMES))), 2), len(NAMES)) if "limit" in query else len(NAMES)
        metadata: dict[str, Any] = {"resourceVersion": "9"}
        if end < len(NAMES):
            metadata["continue"] = str(end)
        items = [{"metadata": {"name": name, "resourceVersion": "9"}, "data": "x" * 100} for name in NAMES[start:end]]
        return web.json_response({"kind": "WidgetList", "metadata": metadata, "items": items})

    stopped = asyncio.Event()
    app = web.Application()
    app.router.add_get("/apis/example.com/v1/widgets", widgets)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        stopped.set()
        await runner.cleanup()


def slim(log: list[str]) -> Any:
    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        log.append(f"transform {obj['metadata']['name']}")
        return {"metadata": obj["metadata"]}

    return transform


async def test_the_first_list_is_a_paged_consistent_list_transformed_as_each_page_arrives() -> None:
    log: list[str] = []
    async with paging_api(log) as url:
        client = Client(RestConfig(host=url, qps=0))
        try:
            listed = await ClientListWatch(client, WIDGETS, page_size=2).list("0", slim(log))
        finally:
            await client.close()
    # At resourceVersion "0" the API server would send everything in one body whatever the limit.
    assert log == [
        "request limit=2",
        "transform a",
        "transform b",
        "request continue=2 limit=2",
        "transform c",
        "transform d",
        "request continue=4 limit=2",
        "transform e",
    ]
    assert listed.items == [{"metadata": {"name": n, "resourceVersion": "9"}} for n in NAMES]
    assert listed.resource_version == "9"


async def test_a_relist_at_a_resource_version_is_one_request_for_the_watch_cache() -> None:
    log: list[str] = []
    async with paging_api(log) as url:
        client = Client(RestConfig(host=url, qps=0))
        try:
            listed = await ClientListWatch(client, WIDGETS, page_size=2).list("7", slim(log))
        finally:
            await client.close()
    assert log == ["request resourceVersion=7", *(f"transform {name}" for name in NAMES)]
    assert len(listed.items) == len(NAMES)


async def test_an_informer_over_the_client_caches_its_first_list_transformed_page_by_page() -> None:
    log: list[str] = []
    async with paging_api(log) as url:
        client = Client(RestConfig(host=url, qps=0))
        informer = SharedInformer.for_resource(client, WIDGETS)
        informer.set_transform(slim(log))
        try:
            async with started(informer):
                await asyncio.wait_for(informer.wait_for_sync(), 10)
        finally:
            await client.close()
    assert log == [
        "request limit=500",
        "transform a",
        "transform b",
        "request continue=2 limit=500",
        "transform c",
        "transform d",
        "request continue=4 limit=500",
        "transform e",
    ]
    assert informer.store.list() == [{"metadata": {"name": n, "resourceVersion": "9"}} for n in NAMES]
