"""The Python baseline for the runtime benchmark: our runtime's manager with one controller over ConfigMaps in
one namespace whose reconciler only reads the object from the cache (the twin of bench/go-noop).

It counts distinct (key, data["gen"]) pairs seen by the reconciler and serves the count as plain text at
GET /count on --count-address once the cache has synced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

import structlog
from aiohttp import web

from llmaz.apis import resources as r
from llmaz.runtime.cache.interfaces import Informer
from llmaz.runtime.client import Client
from llmaz.runtime.controller import ControllerBuilder, Request, Result
from llmaz.runtime.manager import Manager, ManagerOptions
from llmaz.runtime.resource import Resource


class NamespacedSource:
    """Hands out the manager's informers, narrowed to one namespace (as controller-runtime's cache options)."""

    def __init__(self, manager: Manager, namespace: str) -> None:
        self._manager, self._namespace = manager, namespace

    def informer_for(self, resource: Resource, namespace: str | None = None, label_selector: str | None = None,
                     field_selector: str | None = None) -> Informer:  # fmt: skip
        return self._manager.informers.informer_for(resource, self._namespace, label_selector, field_selector)


class NoopReconciler:
    def __init__(self, source: NamespacedSource) -> None:
        self._store = source.informer_for(r.CONFIG_MAPS).store
        self._seen: dict[str, str] = {}
        self.count = 0

    async def reconcile(self, request: Request) -> Result:
        obj = self._store.get(request.key)
        if obj is not None:
            gen = (obj.get("data") or {}).get("gen", "")
            if self._seen.get(request.key) != gen:
                self._seen[request.key] = gen
                self.count += 1
        return Result()


async def serve_count(manager: Manager, reconciler: NoopReconciler, address: str) -> web.AppRunner:
    await manager.informers.wait_for_sync(120)

    async def count(_: web.Request) -> web.Response:
        return web.Response(text=str(reconciler.count))

    app = web.Application()
    app.router.add_get("/count", count)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, port = address.rsplit(":", 1)
    await web.TCPSite(runner, host, int(port)).start()
    return runner


async def run(args: argparse.Namespace) -> None:
    client = await Client.from_kubeconfig(args.kubeconfig)
    manager = Manager(client, ManagerOptions(health_probe_bind_address=None))
    source = NamespacedSource(manager, args.namespace)
    reconciler = NoopReconciler(source)
    manager.add(ControllerBuilder("noop").for_(r.CONFIG_MAPS).build(reconciler, source))
    started = asyncio.create_task(manager.start())
    runner = await serve_count(manager, reconciler, args.count_address)
    try:
        await started
    finally:
        with contextlib.suppress(Exception):
            await runner.cleanup()
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default="bench")
    parser.add_argument("--count-address", default="127.0.0.1:0")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
