"""llmaz-gateway for the gateway benchmark, without an API server: run as its own process
(`python bench/suite/gateway_launcher.py --port P --engine-port E [-- GATEWAY FLAGS...]`) until SIGTERM.

It builds what `python -m llmaz.gateway` builds, minus the parts that need an API server: the same `Catalog`,
`Gateway`, `GatewayMetrics` (process collectors included), `InFlight`, `Waker` and idle detection, JSON logs at
info level (as in the Deployment). Its options are the command's own: its flag parser and `gateway_options`, with
the command's defaults, then the flags given after `--` (the benchmark's BENCH_GATEWAY_FLAGS), so a run can try
another setting of the request path exactly as a user sets it. The launcher sets `--bind-address` (the port
given), `--activator-port 0` (one listener) and `--log-format json`; flags for parts it does not run (probes,
the metrics server, the activator, API keys, the kubeconfig) are parsed and have no effect.

The four informers are replaced by static ones holding one OpenModel, one Playground serving it and one
EndpointSlice of its `-lb` Service with a single ready endpoint, the engine on 127.0.0.1, and a second OpenModel
and Playground (`HELD_MODEL`) whose replica never becomes ready, so that its requests are held; the slice goes through
the production informer transform (`routes.compact_endpoint_slice`) and every object sits in the production
`IndexedStore`, so lookups on the request path run the same code as in a cluster. The Playground does not opt in
to scale to zero, so the scaling client (pointed at an address where nothing listens) is never called; idle
detection runs as it does in production (unless `--scale-to-zero false`). Not run: the Manager's probe and
metrics servers (other ports, off the request path) and the informers' watches (nothing changes during the
benchmark).

For Envoy's subjects the same process is the endpoint picker: with `--epp-port` among the gateway flags it serves
the EPP (`EndpointPicker`, as the command adds it) on the same catalog and schedulers, its decision times in the
gateway's metrics, which `--metrics-port` serves on 127.0.0.1 (`/metrics`, prometheus_client's own server, a
thread that only works when scraped). `--extra-endpoints N` adds N more ready endpoints to the slice, at
127.0.1.1.. on the engine's port, where nothing listens: they are for filling the prefix index through the EPP's
gRPC, never for requests sent through Envoy. `--reuse-port` binds the API's socket with SO_REUSEPORT, so that two
launchers serve one port and the kernel spreads the connections between them (hashing each connection's
addresses), as two replicas behind a Service share its clients.
"""

from __future__ import annotations

import argparse
import asyncio
import builtins
import resource
import signal
import socket
from collections.abc import Sequence

import prometheus_client

from llmaz.gateway.__main__ import epp_options, gateway_options, parse_args
from llmaz.gateway.epp.server import EndpointPicker
from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.proxy.server import Gateway
from llmaz.gateway.routing import routes
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.scaling.idle import IdleDetector, idle_controller
from llmaz.gateway.scaling.scale import PlaygroundScale
from llmaz.gateway.scaling.waker import Waker
from llmaz.runtime import log
from llmaz.runtime.cache.interfaces import IndexFunc, Obj, ResourceEventHandler
from llmaz.runtime.cache.store import IndexedStore
from llmaz.runtime.client import Client
from llmaz.runtime.client.config import RestConfig
from llmaz.runtime.events import EventBroadcaster
from llmaz.runtime.runnable import run_until_cancelled
from llmaz.runtime.server import listener

MODEL = "bench-model"
PLAYGROUND = "bench"
NAMESPACE = "default"
# A second model whose one replica never becomes ready: its requests are held (the EPP's memory per held request).
HELD_MODEL = "bench-held"
HELD_PLAYGROUND = "bench-held"
# Where the scaling client would send requests: port 9 (discard) on loopback, where nothing listens.
NO_API_SERVER = "https://127.0.0.1:9"


class StaticInformer:
    """An informer whose objects are given once and never change; synced from the start."""

    def __init__(self, objects: builtins.list[Obj]) -> None:
        self._store = IndexedStore()
        for obj in objects:
            self._store.upsert(obj)
        self._synced = asyncio.Event()
        self._synced.set()

    @property
    def store(self) -> IndexedStore:
        return self._store

    def add_event_handler(self, handler: ResourceEventHandler) -> None:
        for obj in self._store.list():
            handler.on_add(obj, True)

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        self._store.add_indexers(indexers)

    def has_synced(self) -> bool:
        return True

    async def wait_for_sync(self) -> None:
        await self._synced.wait()


def _endpoint(address: str, index: int) -> dict[str, object]:
    return {
        "addresses": [address],
        "conditions": {"ready": True, "serving": True, "terminating": False},
        "nodeName": "node-1",
        "targetRef": {"kind": "Pod", "namespace": NAMESPACE, "name": f"{PLAYGROUND}-{index}"},
    }


def objects(engine_port: int, extra_endpoints: int = 0) -> tuple[Obj, Obj, Obj]:
    """The OpenModel, the Playground and the EndpointSlice of its `-lb` Service, as the API server lists them;
    `extra_endpoints` more ready endpoints at 127.0.1.1.. (nothing listens there)."""
    if not 0 <= extra_endpoints <= 254:
        raise ValueError(f"--extra-endpoints {extra_endpoints}: give 0 to 254 (addresses 127.0.1.1 to .254)")
    open_model, playground = served_model(MODEL, PLAYGROUND, "bench/model")
    endpoint_slice = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{PLAYGROUND}-lb-x7k2p",
            "namespace": NAMESPACE,
            "labels": {
                routes.SERVICE_NAME_LABEL: f"{PLAYGROUND}-lb",
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": engine_port, "protocol": "TCP"}],
        "endpoints": [_endpoint("127.0.0.1", 0)]
        + [_endpoint(f"127.0.1.{i}", i) for i in range(1, extra_endpoints + 1)],
    }
    return open_model, playground, endpoint_slice


def served_model(model: str, playground: str, model_id: str) -> tuple[Obj, Obj]:
    """The OpenModel `model` (hub id `model_id`) and the Playground `playground` asking one replica of it, as the API
    server lists them."""
    open_model = {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": {"name": model, "creationTimestamp": "2025-01-01T00:00:00Z"},
        "spec": {"familyName": "bench", "source": {"modelHub": {"modelID": model_id}}},
    }
    served = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": {"name": playground, "namespace": NAMESPACE},
        "spec": {"replicas": 1, "modelClaim": {"modelName": model}},
    }
    return open_model, served


def held_objects() -> tuple[Obj, Obj]:
    """The OpenModel and Playground of `HELD_MODEL`: one replica asked for, no endpoint ever, so a request for it is
    held until the gateway's hold timeout (the replica is starting, as far as the gateway can tell)."""
    return served_model(HELD_MODEL, HELD_PLAYGROUND, "bench/held")


def gateway_args(port: int, flags: Sequence[str]) -> argparse.Namespace:
    """The command's flags as `llmaz-gateway` parses them, serving on 127.0.0.1:`port` with no activator, logging
    JSON (a `--log-*` flag in `flags` wins)."""
    return parse_args(["--bind-address", f"127.0.0.1:{port}", "--activator-port", "0", "--log-format", "json",
                       *flags])  # fmt: skip


def _reuse_port_socket(host: str, port: int) -> socket.socket:
    """`bind_socket` for an IPv4 address, with SO_REUSEPORT: another process may bind the same port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


async def serve(args: argparse.Namespace, engine_port: int, extra_endpoints: int = 0, metrics_port: int = 0) -> None:
    open_model, playground, endpoint_slice = objects(engine_port, extra_endpoints)
    held_model, held_playground = held_objects()
    catalog = Catalog(
        StaticInformer([playground, held_playground]),
        StaticInformer([]),
        StaticInformer([open_model, held_model]),
        [StaticInformer([routes.compact_endpoint_slice(endpoint_slice)])],
    )
    client = Client(RestConfig(host=NO_API_SERVER))
    recorder = EventBroadcaster(client).recorder("llmaz-gateway")
    in_flight = InFlight()
    scale = PlaygroundScale(client, recorder) if args.scale_to_zero == "true" else None
    waker = Waker(catalog, scale)
    metrics = GatewayMetrics()
    gateway = Gateway(catalog, gateway_options(args), metrics=metrics, in_flight=in_flight, waker=waker)
    # Stopped as the manager stops runnables: by cancelling them (see llmaz.runtime.runnable).
    tasks = [asyncio.create_task(run_until_cancelled(gateway))]
    if args.epp_port:
        # As the command adds it: the proxy's schedulers, in-flight count, waker and metrics (its decision times).
        picker = EndpointPicker(
            catalog, gateway.pickers, epp_options(args), in_flight=in_flight, waker=waker, metrics=metrics
        )
        tasks.append(asyncio.create_task(run_until_cancelled(picker)))
    if metrics_port:
        prometheus_client.start_http_server(metrics_port, "127.0.0.1", registry=metrics.registry)
    if scale is not None:
        idle = idle_controller(IdleDetector(catalog, scale, in_flight), catalog, in_flight)
        tasks.append(asyncio.create_task(idle.run()))
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: [task.cancel() for task in tasks])
    try:
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, Exception):
                raise outcome
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--engine-port", type=int, required=True)
    parser.add_argument("--extra-endpoints", type=int, default=0, help="more ready endpoints, where nothing listens")
    parser.add_argument("--metrics-port", type=int, default=0, help="serve /metrics on 127.0.0.1 here (0: none)")
    parser.add_argument("--reuse-port", action="store_true", help="bind the API's port with SO_REUSEPORT")
    parser.add_argument("gateway_flags", nargs=argparse.REMAINDER, help="-- then llmaz-gateway flags")
    args = parser.parse_args()
    flags = args.gateway_flags[1:] if args.gateway_flags[:1] == ["--"] else args.gateway_flags
    command = gateway_args(args.port, flags)  # exits with the parser's message on a bad flag
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # every open stream is two sockets
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    log.configure(command.log_level, command.log_format)
    if args.reuse_port:
        # The listener's own name for the function it binds with (imported from llmaz.runtime.server.address).
        setattr(listener, "bind_socket", _reuse_port_socket)  # noqa: B010
    asyncio.run(serve(command, args.engine_port, args.extra_endpoints, args.metrics_port))


if __name__ == "__main__":
    main()
