"""The scheduler extender's HTTP server: kube-scheduler's `filter` and `prioritize` verbs on their own port.

kube-scheduler (a profile with an `extenders` entry, see config/scheduler) POSTs `ExtenderArgs` (`Pod`, and
`Nodes`: the candidate nodes, whole) to `<urlPrefix>/filter` and `<urlPrefix>/prioritize`; the answers are an
`ExtenderFilterResult` (`Nodes`, `FailedNodes`, `Error`) and a list of `HostPriority` (`Host`, `Score`). The field
names are Go's (the extender types have no JSON tags); the decision is `flavors`'. The extender reads node labels
from the request, so it must be configured with `nodeCacheCapable: false`; a request with node names only gets an
`Error` that says so.

Off unless `--scheduler-extender-bind-address` is set. Plain HTTP: the scheduler reaches it through a Service in
the cluster network. Every replica serves it (not leader-elected): the OpenModel cache is all it reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import Counter, Histogram

from llmaz.runtime.address import join_host_port, split_host_port
from llmaz.runtime.cache import Store
from llmaz.runtime.listener import ConnectionLimits, Connections, serving
from llmaz.runtime.log import bounded, get_logger
from llmaz.runtime.metrics import REGISTRY
from llmaz.schedext import flavors

# Node lists are large: a 5,000-node cluster sends a few tens of MiB per call.
MAX_BODY_BYTES = 64 * 1024 * 1024
READ_TIMEOUT = 30.0
NODE_NAMES_ONLY = (
    "llmaz's scheduler extender reads node labels from the request: configure it with nodeCacheCapable: false"
)

REQUESTS = Counter(
    "llmaz_scheduler_extender_requests_total",
    "Scheduler extender calls, by verb and result (ok, error).",
    ["verb", "result"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "llmaz_scheduler_extender_request_duration_seconds",
    "Time to answer a scheduler extender call, by verb.",
    ["verb"],
    registry=REGISTRY,
)


class SchedulerExtender:
    """A Runnable serving the extender verbs; `synced` tells whether the OpenModel cache can be trusted yet."""

    needs_leader_election = False

    def __init__(self, bind_address: str, open_models: Store, synced: Callable[[], bool]) -> None:
        self._host, self._port = split_host_port(bind_address)
        self._models = open_models
        self._synced = synced
        self.port: int | None = None
        self._serving = asyncio.Event()
        self._connections = Connections()
        self._log = get_logger("llmaz.schedext")

    def started(self) -> bool:
        return self._serving.is_set()

    async def wait_started(self) -> None:
        await self._serving.wait()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._connections.middleware])
        app.router.add_post("/filter", self._verb("filter", self.filter))
        app.router.add_post("/prioritize", self._verb("prioritize", self.prioritize))
        return app

    async def run(self, stopping: asyncio.Event) -> None:
        limits = ConnectionLimits(first_message_timeout=READ_TIMEOUT)
        try:
            async with serving(
                self.app(), self._host, self._port, self._connections, limits=limits, keepalive_timeout=READ_TIMEOUT
            ) as self.port:
                self._serving.set()
                self._log.info("scheduler extender serving", address=join_host_port(self._host, self.port))
                await stopping.wait()
        finally:
            self._serving.clear()

    def _model(self, name: str) -> dict[str, Any] | None:
        return self._models.get(name)

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        nodes = _nodes(args)
        if nodes is None:
            return {"NodeNames": _node_names(args), "FailedNodes": {}, "Error": NODE_NAMES_ONLY}
        kept, failed = flavors.filter_nodes(_pod(args), nodes, self._model)
        return {"Nodes": {"items": kept}, "FailedNodes": failed, "Error": ""}

    def prioritize(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        nodes = _nodes(args)
        if nodes is None:
            return [{"Host": name, "Score": 0} for name in _node_names(args)]
        return [{"Host": host, "Score": score} for host, score in flavors.prioritize(_pod(args), nodes, self._model)]

    def _verb(
        self, verb: str, answer: Callable[[dict[str, Any]], Any]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            started = time.perf_counter()
            try:
                if not self._synced():
                    raise ValueError("the OpenModel cache has not synced yet")
                args = orjson.loads(await request.read())
                if not isinstance(args, dict):
                    raise ValueError("expected ExtenderArgs, a JSON object")
                body = answer(args)
                result = "ok"
            except (ValueError, web.HTTPRequestEntityTooLarge) as err:
                self._log.warning("scheduler extender call refused", verb=verb, error=bounded(str(err)))
                REQUESTS.labels(verb=verb, result="error").inc()
                return web.Response(status=400, text=f"{bounded(str(err))}\n")
            REQUESTS.labels(verb=verb, result=result).inc()
            LATENCY.labels(verb=verb).observe(time.perf_counter() - started)
            return web.Response(body=orjson.dumps(body), content_type="application/json")

        return handle


def _field(args: dict[str, Any], name: str) -> Any:
    """A field of ExtenderArgs under its Go name, or any capitalisation (Go's decoder accepts either)."""
    for key, value in args.items():
        if key.lower() == name.lower():
            return value
    return None


def _pod(args: dict[str, Any]) -> dict[str, Any]:
    pod = _field(args, "Pod")
    if not isinstance(pod, dict):
        raise ValueError("ExtenderArgs has no Pod")
    return pod


def _nodes(args: dict[str, Any]) -> list[dict[str, Any]] | None:
    nodes = _field(args, "Nodes")
    if nodes is None:
        return None
    items = nodes.get("items") if isinstance(nodes, dict) else None
    if not isinstance(items, list):
        raise ValueError("ExtenderArgs.Nodes has no items list")
    return [node for node in items if isinstance(node, dict)]


def _node_names(args: dict[str, Any]) -> list[str]:
    names = _field(args, "NodeNames")
    return [str(name) for name in names] if isinstance(names, list) else []
