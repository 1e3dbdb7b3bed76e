"""llmaz-gateway: the composition root. Flags, logging, client, informers, the servers and the loops.

Nothing imports this module. The runtime's Manager runs it all: probes (`--health-probe-bind-address`), the
metrics endpoint and the API first, then the informers (readiness waits for their first list), with no
leader election (every replica serves; the autoscaler holds a Lease of its own, so that one replica decides).
On SIGTERM or SIGINT the API stops accepting at once, readiness fails, and requests in flight get `--drain-timeout`
seconds to finish (streams included) before the process exits; the Manager's own shutdown bound leaves a margin
above that.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

from prometheus_client import CollectorRegistry

from llmaz.apis.routing import PREFIX_AWARE, STRATEGIES, RoutingWeights, parse_weight
from llmaz.gateway.epp.server import DEFAULT_PORT as EPP_PORT
from llmaz.gateway.epp.server import EndpointPicker, EppOptions
from llmaz.gateway.flow.control import (
    DEFAULT_QUEUE_SIZE,
    DEFAULT_QUEUE_TTL,
    DEFAULT_RESERVED_BAND,
    RESERVE_KEPT_FOR,
    FlowOptions,
    parse_reserved_band,
)
from llmaz.gateway.flow.saturation import (
    DEFAULT_ENDPOINT_REQUESTS,
    DEFAULT_ENGINE_WAITING,
    DEFAULT_UTILISATION,
    SaturationOptions,
)
from llmaz.gateway.proxy.auth import ApiKeys, Authenticator
from llmaz.gateway.proxy.body import DEFAULT_MAX_BODY_BYTES
from llmaz.gateway.proxy.forwarding import ProxyOptions
from llmaz.gateway.proxy.keys import SecretKeys
from llmaz.gateway.proxy.limits import DEFAULT_MAX_TOKENS_RESERVATION, Limits
from llmaz.gateway.proxy.metrics import GatewayMetrics, ModelReadiness
from llmaz.gateway.proxy.server import DEFAULT_MAX_CONNECTIONS, Gateway, GatewayOptions
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.filters import DEFAULT_LOAD_FACTOR
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import LoadSignals, NoSignals
from llmaz.gateway.routing.picker import RoutingOptions
from llmaz.gateway.routing.signals import DEFAULT_INTERVAL, DEFAULT_TIMEOUT, EngineSignals
from llmaz.gateway.scaling.activator import DEFAULT_PORT, Activator, ActivatorOptions, activator_controller
from llmaz.gateway.scaling.autoscaler import DEFAULT_INTERVAL as AUTOSCALER_INTERVAL
from llmaz.gateway.scaling.autoscaler import Autoscaler, AutoscalerMetrics, AutoscalerOptions
from llmaz.gateway.scaling.idle import IdleDetector, idle_controller
from llmaz.gateway.scaling.scale import PlaygroundScale
from llmaz.gateway.scaling.waker import Waker
from llmaz.runtime import flags, log, tracing
from llmaz.runtime.client.config import in_cluster_namespace, load
from llmaz.runtime.entrypoint import add_process_flags, exit_status, run_manager, start_logging
from llmaz.runtime.manager import Manager, ManagerOptions
from llmaz.runtime.metrics import REGISTRY as RUNTIME_REGISTRY
from llmaz.runtime.server.address import split_host_port
from llmaz.runtime.server.metrics_server import MetricsServer

# Time the stop sequence gets beyond the drain: informers and servers winding down.
SHUTDOWN_MARGIN = 5.0


_weight = flags.parsed_by(parse_weight)


def parse_fraction(text: str) -> float:
    """A number above 0 and at most 1."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise ValueError(f"{text!r} must be above 0 and at most 1")
    return value


_fraction = flags.parsed_by(parse_fraction)


def default_gateway_service() -> str:
    """The gateway's own Service: `llmaz-gateway` in the pod's namespace (llmaz-system outside a cluster)."""
    return f"{in_cluster_namespace('llmaz-system')}/llmaz-gateway"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="llmaz-gateway", description="One OpenAI-compatible endpoint for every model llmaz serves."
    )
    add = parser.add_argument
    add("--bind-address", type=flags.bind_address, default=":8000", help="OpenAI API address (default :8000)")
    add(
        "--proxy-bind-address",
        type=flags.bind_address,
        default=None,
        help="where the Python proxy serves the OpenAI API instead of --bind-address, whose host the activator and "
        "the Endpoint Picker keep (the Envoy data plane: 127.0.0.1:8010, Envoy on the API port; default: "
        "--bind-address)",
    )
    add(
        "--metrics-bind-address",
        type=flags.bind_address,
        default=":8080",
        help="/metrics address, plain HTTP; 0 disables it (default :8080)",
    )
    add(
        "--health-probe-bind-address",
        type=flags.bind_address,
        default=":8081",
        help="/healthz and /readyz address (default :8081)",
    )
    add("--api-keys-file", type=Path, default=None, help="file of accepted API keys, one per line (default: none)")
    add(
        "--api-key-secrets",
        default="false",
        choices=["true", "false"],
        help='accept the keys of the Secrets labelled llmaz.io/api-key: "true" in the gateway\'s namespace, with '
        "their tenants and limits, read live (default false)",
    )
    add(
        "--max-tokens-cap",
        type=flags.positive_int,
        default=None,
        help="refuse (400) a request asking to generate more tokens than this (default: no cap)",
    )
    add(
        "--default-max-tokens-reservation",
        type=flags.positive_int,
        default=DEFAULT_MAX_TOKENS_RESERVATION,
        help="tokens reserved against a key's tokens-per-minute for a request without max_tokens "
        f"(default {DEFAULT_MAX_TOKENS_RESERVATION})",
    )
    add("--max-request-bytes", type=flags.positive_int, default=DEFAULT_MAX_BODY_BYTES, help="largest request body")
    add("--header-timeout", type=flags.positive_seconds, default=30.0, help="seconds to receive request headers")
    add("--max-connections", type=flags.positive_int, default=DEFAULT_MAX_CONNECTIONS, help="connections held per port")
    add("--body-timeout", type=flags.positive_seconds, default=60.0, help="seconds to receive a request body")
    add("--upstream-connect-timeout", type=flags.positive_seconds, default=5.0, help="seconds to connect to an engine")
    add("--upstream-timeout", type=flags.positive_seconds, default=300.0, help="seconds to wait for each engine read")
    add("--upstream-retries", type=int, default=2, choices=range(10), metavar="{0..9}", help="default 2")
    add("--drain-timeout", type=flags.positive_seconds, default=30.0, help="seconds in-flight requests get on stop")
    add(
        "--wake-timeout", type=flags.positive_seconds, default=300.0, help="seconds a request waits for a model to wake"
    )
    add(
        "--hold-timeout",
        type=flags.positive_seconds,
        default=30.0,
        help="seconds a request waits for replicas to start",
    )
    add(
        "--scale-to-zero",
        default="true",
        choices=["true", "false"],
        help="scale Playgrounds annotated llmaz.io/scale-to-zero-after from and to zero (default true)",
    )
    add(
        "--routing-strategy",
        default=PREFIX_AWARE,
        choices=STRATEGIES,
        help="how an endpoint is picked; a Playground's llmaz.io/routing-strategy overrides it "
        f"(default {PREFIX_AWARE})",
    )
    weights = RoutingWeights()
    add("--prefix-weight", type=_weight, default=weights.prefix, help="prefix-aware: prefix affinity's weight")
    add("--queue-weight", type=_weight, default=weights.queue, help="prefix-aware: the queue length's weight")
    add(
        "--utilisation-weight",
        type=_weight,
        default=weights.utilisation,
        help="prefix-aware: the free KV cache or slots' weight",
    )
    add(
        "--load-factor",
        type=flags.at_least_one,
        default=DEFAULT_LOAD_FACTOR,
        help="prefix-aware: an endpoint takes a prefix's requests while its load stays within this factor of the "
        f"average (default {DEFAULT_LOAD_FACTOR})",
    )
    add(
        "--activator-port",
        type=flags.port,
        default=DEFAULT_PORT,
        help="port where direct clients of a sleeping Playground's -lb Service are held and forwarded "
        f"(on --bind-address's host; 0 disables the activator; default {DEFAULT_PORT})",
    )
    add(
        "--epp-port",
        type=flags.port,
        default=0,
        help="port of the Endpoint Picker for a Gateway API Inference Extension gateway (Envoy's ext_proc gRPC "
        f"service and gRPC health, plain text, on --bind-address's host; conventionally {EPP_PORT}; default 0: off)",
    )
    add(
        "--epp-fallbacks",
        type=int,
        default=0,
        choices=range(10),
        metavar="{0..9}",
        help="fallback endpoints the Endpoint Picker names after its pick, best first, for a gateway whose load "
        "balancer takes a list (Envoy's ORIGINAL_DST cluster takes one address; default 0)",
    )
    add(
        "--gateway-service",
        type=flags.namespaced_name,
        default=None,
        help="NAMESPACE/NAME of the gateway's own Service, whose ready pods the activator's EndpointSlices list "
        "(default: llmaz-gateway in the pod's namespace, else llmaz-system/llmaz-gateway)",
    )
    add(
        "--engine-metrics-interval",
        type=flags.non_negative_seconds,
        default=DEFAULT_INTERVAL,
        help="seconds between reads of every routed engine's /metrics, the load routing sees; 0 turns engine "
        f"signals off (default {DEFAULT_INTERVAL})",
    )
    add(
        "--engine-metrics-timeout",
        type=flags.positive_seconds,
        default=DEFAULT_TIMEOUT,
        help="seconds one engine's metrics read may take, whatever the interval; its load is kept through a few "
        f"failed reads (default {DEFAULT_TIMEOUT:g})",
    )
    add(
        "--flow-control",
        default="false",
        choices=["true", "false"],
        help="queue the requests of a saturated model (every endpoint full), served by priority band then fairly "
        "between tenants; a model that is not saturated is never held (default false)",
    )
    add(
        "--flow-engine-waiting",
        type=flags.positive_int,
        default=DEFAULT_ENGINE_WAITING,
        help="flow control: an endpoint whose engine is at capacity is full with this many requests waiting in the "
        f"engine (default {DEFAULT_ENGINE_WAITING})",
    )
    add(
        "--flow-utilisation",
        type=_fraction,
        default=DEFAULT_UTILISATION,
        help="flow control: an engine reporting this utilisation (KV cache, busy slots; above 0, at most 1) is at "
        f"capacity even with nothing waiting (default {DEFAULT_UTILISATION:g})",
    )
    add(
        "--flow-endpoint-requests",
        type=flags.positive_int,
        default=DEFAULT_ENDPOINT_REQUESTS,
        help="flow control: an endpoint whose load is not known is full with this many of this replica's requests "
        f"in flight to it (default {DEFAULT_ENDPOINT_REQUESTS})",
    )
    add(
        "--flow-queue-size",
        type=flags.positive_int,
        default=DEFAULT_QUEUE_SIZE,
        help="flow control: requests a saturated model's queue holds; beyond, the newest of the lowest band is shed "
        f"with 429 (default {DEFAULT_QUEUE_SIZE})",
    )
    add(
        "--flow-queue-ttl",
        type=flags.positive_seconds,
        default=DEFAULT_QUEUE_TTL,
        help=f"flow control: seconds a request may wait in its model's queue (default {DEFAULT_QUEUE_TTL:g})",
    )
    add(
        "--flow-reserved-slots",
        type=flags.non_negative_int,
        default=0,
        help="flow control: slots of each engine kept free for requests of --flow-reserved-band and above while "
        f"such requests come (within {RESERVE_KEPT_FOR:g} s); lower bands wait in the gateway instead, never in an "
        "engine's queue (default 0: no reserve)",
    )
    add(
        "--flow-reserved-band",
        type=flags.parsed_by(parse_reserved_band),
        default=DEFAULT_RESERVED_BAND,
        help=f"flow control: the lowest band that may use the reserved slots (default {DEFAULT_RESERVED_BAND})",
    )
    add(
        "--autoscaler",
        default="true",
        choices=["true", "false"],
        help="scale Playgrounds whose elasticConfig.scaleTrigger is requests on their engines' load, from the one "
        "replica holding the Lease llmaz-gateway-autoscaler (default true)",
    )
    add(
        "--autoscaler-interval",
        type=flags.positive_seconds,
        default=AUTOSCALER_INTERVAL,
        help=f"seconds between the autoscaler's decisions (default {AUTOSCALER_INTERVAL:g})",
    )
    add(
        "--resolve",
        type=flags.address_pair,
        action="append",
        default=[],
        metavar="ADDRESS=TARGET",
        help="connect to TARGET for endpoints at ADDRESS, like curl's --resolve (repeatable; for debugging)",
    )
    tracing.add_tracing_flags(parser)
    add_process_flags(parser)
    args = parser.parse_args(argv)
    if args.epp_port and args.epp_port in (split_host_port(args.bind_address)[1], activator_port(args)):
        parser.error(f"--epp-port {args.epp_port}: the API or the activator listens there; pick another port")
    if args.gateway_service is None:
        args.gateway_service = default_gateway_service()
    return args


def activator_port(args: argparse.Namespace) -> int:
    """The activator's port, 0 when it is off: it wakes models through scale to zero, so it needs it on."""
    return int(args.activator_port) if args.scale_to_zero == "true" else 0


def activator_address(args: argparse.Namespace) -> str | None:
    port = activator_port(args)
    if port == 0:
        return None
    host, _ = split_host_port(args.bind_address)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def gateway_options(args: argparse.Namespace) -> GatewayOptions:
    return GatewayOptions(
        bind_address=args.proxy_bind_address or args.bind_address,
        activator_address=activator_address(args),
        max_body_bytes=args.max_request_bytes,
        header_timeout=args.header_timeout,
        max_connections=args.max_connections,
        body_timeout=args.body_timeout,
        drain_timeout=args.drain_timeout,
        wake_timeout=args.wake_timeout,
        hold_timeout=args.hold_timeout,
        max_tokens_cap=args.max_tokens_cap,
        default_max_tokens_reservation=args.default_max_tokens_reservation,
        proxy=ProxyOptions(
            connect_timeout=args.upstream_connect_timeout,
            read_timeout=args.upstream_timeout,
            retries=args.upstream_retries,
            resolve=dict(args.resolve),
        ),
        routing=routing_options(args),
        flow=flow_options(args),
    )


def flow_options(args: argparse.Namespace) -> FlowOptions:
    return FlowOptions(
        enabled=args.flow_control == "true",
        saturation=SaturationOptions(
            engine_waiting=args.flow_engine_waiting,
            utilisation=args.flow_utilisation,
            endpoint_requests=args.flow_endpoint_requests,
        ),
        queue_size=args.flow_queue_size,
        queue_ttl=args.flow_queue_ttl,
        reserved_slots=args.flow_reserved_slots,
        reserved_band=args.flow_reserved_band,
    )


def epp_options(args: argparse.Namespace) -> EppOptions:
    host, _ = split_host_port(args.bind_address)
    return EppOptions(
        host=host,
        port=args.epp_port,
        max_body_bytes=args.max_request_bytes,
        drain_timeout=args.drain_timeout,
        fallbacks=args.epp_fallbacks,
        max_tokens_cap=args.max_tokens_cap,
        default_max_tokens_reservation=args.default_max_tokens_reservation,
        hold_timeout=args.hold_timeout,
        wake_timeout=args.wake_timeout,
    )


def routing_options(args: argparse.Namespace) -> RoutingOptions:
    return RoutingOptions(
        strategy=args.routing_strategy,
        weights=RoutingWeights(args.prefix_weight, args.queue_weight, args.utilisation_weight),
        load_factor=args.load_factor,
    )


def engine_signals(args: argparse.Namespace, catalog: Catalog, registry: CollectorRegistry) -> EngineSignals | None:
    """The engine signals the flags ask for, or None when they are off (interval 0)."""
    if args.engine_metrics_interval == 0:
        return None
    return EngineSignals(
        catalog,
        interval=args.engine_metrics_interval,
        timeout=args.engine_metrics_timeout,
        resolve=dict(args.resolve),
        registry=registry,
    )


def autoscaler_options(args: argparse.Namespace) -> AutoscalerOptions | None:
    """The autoscaler's options, None when it is off; its Lease is in the gateway Service's namespace."""
    if args.autoscaler != "true":
        return None
    namespace, _, _ = args.gateway_service.partition("/")
    return AutoscalerOptions(
        lease_namespace=namespace, interval=args.autoscaler_interval, scale_to_zero=args.scale_to_zero == "true"
    )


def load_api_keys(path: Path | None) -> ApiKeys | None:
    """The API keys, read once now so that a missing or unreadable file stops the start (OSError)."""
    if path is None:
        return None
    keys = ApiKeys(path)
    count = keys.load()
    log.get_logger("llmaz.gateway").info("API keys loaded", path=str(path), keys=count)
    return keys


def gateway_metrics() -> GatewayMetrics:
    """The gateway's metrics, with the runtime's registry (leader election, reconciles, the API client, informers,
    the process) served beside them on one `/metrics`."""
    return GatewayMetrics(include=RUNTIME_REGISTRY)


def manager_options(args: argparse.Namespace) -> ManagerOptions:
    """The runtime Manager's options: probes, the shutdown bound above the drain, and the heap frozen once the caches
    have synced (as llmaz-manager does: later full collections skip the start-up objects and the initial cache)."""
    return ManagerOptions(
        health_probe_bind_address=args.health_probe_bind_address,
        graceful_shutdown_timeout=args.drain_timeout + SHUTDOWN_MARGIN,
        freeze_heap_after_sync=True,
    )


class _Shared(TypedDict):
    """What the proxy and the Endpoint Picker of one replica are given alike."""

    in_flight: InFlight
    waker: Waker
    api_keys: Authenticator | None
    limits: Limits
    metrics: GatewayMetrics


def add_runnables(manager: Manager, args: argparse.Namespace, api_keys: ApiKeys | None) -> None:
    """The gateway's parts, on the manager's informers: routing, scaling (when on), the activator, the server."""
    metrics = gateway_metrics()
    catalog = Catalog.watch(manager.informers, args.gateway_service)
    ModelReadiness(catalog, metrics.registry)
    recorder = manager.event_recorder("llmaz-gateway")
    in_flight = InFlight()
    signals = engine_signals(args, catalog, metrics.registry)
    if signals is not None:
        manager.add(signals)
    scale = None
    if args.scale_to_zero == "true":
        scale = PlaygroundScale(manager.client, recorder)
        idle = IdleDetector(catalog, scale, in_flight, signals or NoSignals())
        manager.add(idle_controller(idle, catalog, in_flight))
    waker = Waker(catalog, scale)
    authenticator = None
    limits = Limits(time.monotonic)
    if api_keys is not None or args.api_key_secrets == "true":
        secrets = None
        if args.api_key_secrets == "true":
            namespace, _, _ = args.gateway_service.partition("/")
            secrets = SecretKeys.watch(manager.informers, namespace, forget=limits.forget)
        authenticator = Authenticator(api_keys, secrets)
    # Runs when disabled too: it then removes the slices an earlier configuration left behind.
    options = ActivatorOptions(port=activator_port(args), gateway_service=args.gateway_service)
    manager.add(activator_controller(Activator(manager.client, catalog, recorder, options), catalog))
    # The proxy and the Endpoint Picker share the catalog, schedulers, in-flight count, waker, keys and limits: a
    # request routes, is held, wakes its model, counts as load, is authenticated and spends its key's budget the same
    # through either.
    shared = _Shared(in_flight=in_flight, waker=waker, api_keys=authenticator, limits=limits, metrics=metrics)
    gateway = Gateway(catalog, gateway_options(args), signals=signals, adapters=signals, **shared)
    if signals is not None and gateway.flow is not None:
        signals.on_cycle(gateway.flow.refresh)  # new loads: the queues of saturated models look for room
    manager.add(gateway)
    manager.add_readyz_check("gateway", gateway.serving)
    if args.epp_port:
        picker = EndpointPicker(catalog, gateway.pickers, epp_options(args), recognised=signals, **shared)
        manager.add(picker)
    autoscaling = autoscaler_options(args)
    if autoscaling is not None:
        engine_load: LoadSignals = signals or NoSignals()
        metrics_of_autoscaler = AutoscalerMetrics(metrics.registry)
        held = None if gateway.flow is None else gateway.flow.held  # what flow control holds is load too
        manager.add(
            Autoscaler(
                catalog,
                manager.client,
                recorder,
                engine_load,
                in_flight,
                autoscaling,
                metrics_of_autoscaler,
                held=held,
            )
        )
    if args.metrics_bind_address != "0":
        manager.add(MetricsServer(args.metrics_bind_address, secure=False, registry=metrics.registry))


async def run(args: argparse.Namespace, api_keys: ApiKeys | None) -> None:
    await run_manager(
        await load(args.kubeconfig), manager_options(args), lambda manager: add_runnables(manager, args, api_keys)
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logger = start_logging(args, "llmaz.gateway")
    try:
        api_keys = load_api_keys(args.api_keys_file)
    except (OSError, UnicodeDecodeError) as err:
        logger.error("cannot read the API keys file", path=str(args.api_keys_file), error=str(err))
        return 1
    try:
        traced = tracing.start_from(args, "llmaz-gateway")
    except ValueError as err:
        logger.error("cannot start tracing", error=str(err))
        return 2
    logger.info(
        "starting gateway",
        bind_address=args.bind_address,
        activator_port=activator_port(args),
        epp_port=args.epp_port,
        gateway_service=args.gateway_service,
        api_keys=api_keys is not None,
        api_key_secrets=args.api_key_secrets == "true",
        engine_metrics_interval=args.engine_metrics_interval,
        autoscaler=args.autoscaler == "true",
        flow_control=args.flow_control == "true",
        tracing=traced,
    )
    try:
        return exit_status(run(args, api_keys), logger, "gateway")
    finally:
        tracing.shutdown()


if __name__ == "__main__":
    sys.exit(main())
