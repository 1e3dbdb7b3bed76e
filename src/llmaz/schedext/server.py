"""The scheduler extender's HTTP server: kube-scheduler's `filter` and `prioritize` verbs on their own port.

kube-scheduler (a profile with an `extenders` entry, see config/scheduler) POSTs `ExtenderArgs` to
`<urlPrefix>/filter` and `<urlPrefix>/prioritize`: the `Pod`, and with `nodeCacheCapable: true` the candidate
nodes' names (`NodeNames`). The answers are an `ExtenderFilterResult` (`NodeNames`, `FailedNodes`, `Error`) and a
list of `HostPriority` (`Host`, `Score`). The field names are Go's (the extender types have no JSON tags); the
decision is `flavors'`, over the node labels of the manager's Node cache.

Node names, not Node objects: with `nodeCacheCapable: false` kube-scheduler sends every candidate Node whole, tens
of MiB per call on a large cluster, and decoding that blocks the event loop that also renews the Lease and answers
admission for hundreds of milliseconds (a worker thread would not help: the JSON decoder holds the GIL). A
names-only call is a pod and a list of names, about 0.2 MiB for 5,000 nodes, decoded in about a millisecond; the
body limit keeps it that small, and a call carrying Node objects gets an `Error` that says how to configure the
extender.

Off unless `--scheduler-extender-bind-address` is set. Plain HTTP: the scheduler reaches it through a Service in
the cluster network. Every replica serves it (not leader-elected): the OpenModel and Node caches are all it reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import Counter, Histogram

from llmaz.runtime.cache import Store
from llmaz.runtime.log import bounded, get_logger
from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.runnable import until_cancelled
from llmaz.runtime.server.address import join_host_port, split_host_port
from llmaz.runtime.server.listener import ConnectionLimits, Connections, serving
from llmaz.schedext import flavors

# A pod (at most 1.5 MiB, etcd's object limit) and the names of 5,000 nodes (at most 1.3 MiB).
MAX_BODY_BYTES = 4 * 1024 * 1024
READ_TIMEOUT = 30.0
NODE_CACHE_CAPABLE = (
    "llmaz's scheduler extender reads nodes from its own cache: configure it with nodeCacheCapable: true, so that "
    "kube-scheduler sends node names instead of Node objects"
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
    """A Runnable serving the extender verbs from the OpenModel and Node caches; `synced` tells whether they can be
    trusted yet."""

    needs_leader_election = False

    def __init__(self, bind_address: str, open_models: Store, nodes: Store, synced: Callable[[], bool]) -> None:
        self._host, self._port = split_host_port(bind_address)
        self._models = open_models
        self._nodes = nodes
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

    async def run(self) -> None:
        limits = ConnectionLimits(first_message_timeout=READ_TIMEOUT)
        try:
            async with serving(
                self.app(), self._host, self._port, self._connections, limits=limits, keepalive_timeout=READ_TIMEOUT
            ) as self.port:
                self._serving.set()
                self._log.info("scheduler extender serving", address=join_host_port(self._host, self.port))
                await until_cancelled()
        finally:
            self._serving.clear()

    def _model(self, name: str) -> dict[str, Any] | None:
        return self._models.get(name)

    def _labels(self, name: str) -> dict[str, str] | None:
        node = self._nodes.get(name)
        if node is None:
            return None
        labels: dict[str, str] = (node.get("metadata") or {}).get("labels") or {}
        return labels

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        names = _node_names(args)
        if names is None:
            return {"NodeNames": None, "FailedNodes": {}, "Error": NODE_CACHE_CAPABLE}
        kept, failed = flavors.filter_nodes(_pod(args), names, self._labels, self._model)
        return {"NodeNames": kept, "FailedNodes": failed, "Error": ""}

    def prioritize(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        names = _node_names(args)
        if names is None:
            raise ValueError(NODE_CACHE_CAPABLE)
        scores = flavors.prioritize(_pod(args), names, self._labels, self._model)
        return [{"Host": host, "Score": score} for host, score in scores]

    def _verb(
        self, verb: str, answer: Callable[[dict[str, Any]], Any]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            started = time.perf_counter()
            try:
                if not self._synced():
                    raise ValueError("the OpenModel and Node caches have not synced yet")
                args = orjson.loads(await request.read())
                if not isinstance(args, dict):
                    raise ValueError("expected ExtenderArgs, a JSON object")
                body = answer(args)
                result = "ok"
            except web.HTTPRequestEntityTooLarge:
                return self._refused(verb, f"request body over {MAX_BODY_BYTES // 2**20} MiB: {NODE_CACHE_CAPABLE}")
            except ValueError as err:
                return self._refused(verb, bounded(str(err)))
            REQUESTS.labels(verb=verb, result=result).inc()
            LATENCY.labels(verb=verb).observe(time.perf_counter() - started)
            return web.Response(body=orjson.dumps(body), content_type="application/json")

        return handle

    def _refused(self, verb: str, reason: str) -> web.Response:
        self._log.warning("scheduler extender call refused", verb=verb, error=reason)
        REQUESTS.labels(verb=verb, result="error").inc()
        return web.Response(status=400, text=f"{reason}\n")


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


def _node_names(args: dict[str, Any]) -> list[str] | None:
    """The candidate node names; None when the call carries Node objects instead (`nodeCacheCapable: false`)."""
    names = _field(args, "NodeNames")
    if names is None:
        if _field(args, "Nodes") is not None:
            return None
        raise ValueError("ExtenderArgs has no NodeNames")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValueError("ExtenderArgs.NodeNames must be a list of node names")
    return names
