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
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from llmaz.apis.routing import LEAST_OUTSTANDING, STRATEGIES, RoutingWeights, parse_weight
from llmaz.gateway.proxy.auth import ApiKeys
from llmaz.gateway.proxy.body import DEFAULT_MAX_BODY_BYTES
from llmaz.gateway.proxy.forwarding import ProxyOptions
from llmaz.gateway.proxy.metrics import GatewayMetrics, ModelReadiness
from llmaz.gateway.proxy.server import DEFAULT_MAX_CONNECTIONS, Gateway, GatewayOptions
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import LoadSignals, NoSignals
from llmaz.gateway.routing.picker import DEFAULT_LOAD_FACTOR, RoutingOptions
from llmaz.gateway.routing.signals import DEFAULT_INTERVAL, MIN_DEFAULT_TIMEOUT, EngineSignals
from llmaz.gateway.scaling.activator import DEFAULT_PORT, Activator, ActivatorOptions, activator_controller
from llmaz.gateway.scaling.autoscaler import DEFAULT_INTERVAL as AUTOSCALER_INTERVAL
from llmaz.gateway.scaling.autoscaler import Autoscaler, AutoscalerMetrics, AutoscalerOptions
from llmaz.gateway.scaling.idle import IdleDetector, idle_controller
from llmaz.gateway.scaling.scale import PlaygroundScale
from llmaz.gateway.scaling.waker import Waker
from llmaz.runtime import log
from llmaz.runtime.address import split_host_port
from llmaz.runtime.client.config import in_cluster_namespace, load
from llmaz.runtime.entrypoint import add_process_flags, exit_status, run_manager, start_logging
from llmaz.runtime.manager import Manager, ManagerOptions
from llmaz.runtime.metrics_server import MetricsServer

# Time the stop sequence gets beyond the drain: informers and servers winding down.
SHUTDOWN_MARGIN = 5.0


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, got {text}")
    return value


def _weight(text: str) -> float:
    try:
        return parse_weight(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _load_factor(text: str) -> float:
    value = float(text)
    if not 1 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of at least 1, got {text}")
    return value


def _address_pair(text: str) -> tuple[str, str]:
    address, sep, target = text.partition("=")
    if not sep or not address or not target:
        raise argparse.ArgumentTypeError(f"expected ADDRESS=TARGET, got {text!r}")
    return address, target


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port (0-65535), got {text}")
    return value


def _namespaced_name(text: str) -> str:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return text


def default_gateway_service() -> str:
    """The gateway's own Service: `llmaz-gateway` in the pod's namespace (llmaz-system outside a cluster)."""
    return f"{in_cluster_namespace('llmaz-system')}/llmaz-gateway"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="llmaz-gateway", description="One OpenAI-compatible endpoint for every model llmaz serves."
    )
    add = parser.add_argument
    add("--bind-address", default=":8000", help="OpenAI API address (default :8000)")
    add("--metrics-bind-address", default=":8080", help="/metrics address, plain HTTP; 0 disables it (default :8080)")
    add("--health-probe-bind-address", default=":8081", help="/healthz and /readyz address (default :8081)")
    add("--api-keys-file", type=Path, default=None, help="file of accepted API keys, one per line (default: none)")
    add("--max-request-bytes", type=_positive_int, default=DEFAULT_MAX_BODY_BYTES, help="largest request body")
    add("--header-timeout", type=_positive_float, default=30.0, help="seconds to receive request headers")
    add("--max-connections", type=_positive_int, default=DEFAULT_MAX_CONNECTIONS, help="connections held per port")
    add("--body-timeout", type=_positive_float, default=60.0, help="seconds to receive a request body")
    add("--upstream-connect-timeout", type=_positive_float, default=5.0, help="seconds to connect to an engine")
    add("--upstream-timeout", type=_positive_float, default=300.0, help="seconds to wait for each engine read")
    add("--upstream-retries", type=int, default=2, choices=range(10), metavar="{0..9}", help="default 2")
    add("--drain-timeout", type=_positive_float, default=30.0, help="seconds in-flight requests get on stop")
    add("--wake-timeout", type=_positive_float, default=300.0, help="seconds a request waits for a model to wake")
    add("--hold-timeout", type=_positive_float, default=30.0, help="seconds a request waits for replicas to start")
    add(
        "--scale-to-zero",
        default="true",
        choices=["true", "false"],
        help="scale Playgrounds annotated llmaz.io/scale-to-zero-after from and to zero (default true)",
    )
    add(
        "--routing-strategy",
        default=LEAST_OUTSTANDING,
        choices=STRATEGIES,
        help="how an endpoint is picked; a Playground's llmaz.io/routing-strategy overrides it "
        f"(default {LEAST_OUTSTANDING})",
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
        type=_load_factor,
        default=DEFAULT_LOAD_FACTOR,
        help="prefix-aware: an endpoint takes a prefix's requests while its load stays within this factor of the "
        f"average (default {DEFAULT_LOAD_FACTOR})",
    )
    add(
        "--activator-port",
        type=_port,
        default=DEFAULT_PORT,
        help="port where direct clients of a sleeping Playground's -lb Service are held and forwarded "
        f"(on --bind-address's host; 0 disables the activator; default {DEFAULT_PORT})",
    )
    add(
        "--gateway-service",
        type=_namespaced_name,
        default=None,
        help="NAMESPACE/NAME of the gateway's own Service, whose ready pods the activator's EndpointSlices list "
        "(default: llmaz-gateway in the pod's namespace, else llmaz-system/llmaz-gateway)",
    )
    add(
        "--engine-metrics-interval",
        type=_non_negative_float,
        default=DEFAULT_INTERVAL,
        help="seconds between reads of every routed engine's /metrics, the load routing sees; 0 turns engine "
        f"signals off (default {DEFAULT_INTERVAL})",
    )
    add(
        "--engine-metrics-timeout",
        type=_positive_float,
        default=None,
        help=f"seconds one engine's metrics read may take (default: the interval, at least {MIN_DEFAULT_TIMEOUT})",
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
        type=_positive_float,
        default=AUTOSCALER_INTERVAL,
        help=f"seconds between the autoscaler's decisions (default {AUTOSCALER_INTERVAL:g})",
    )
    add(
        "--resolve",
        type=_address_pair,
        action="append",
        default=[],
        metavar="ADDRESS=TARGET",
        help="connect to TARGET for endpoints at ADDRESS, like curl's --resolve (repeatable; for debugging)",
    )
    add_process_flags(parser)
    args = parser.parse_args(argv)
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
        bind_address=args.bind_address,
        activator_address=activator_address(args),
        max_body_bytes=args.max_request_bytes,
        header_timeout=args.header_timeout,
        max_connections=args.max_connections,
        body_timeout=args.body_timeout,
        drain_timeout=args.drain_timeout,
        wake_timeout=args.wake_timeout,
        hold_timeout=args.hold_timeout,
        proxy=ProxyOptions(
            connect_timeout=args.upstream_connect_timeout,
            read_timeout=args.upstream_timeout,
            retries=args.upstream_retries,
            resolve=dict(args.resolve),
        ),
        routing=routing_options(args),
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


def add_runnables(manager: Manager, args: argparse.Namespace, api_keys: ApiKeys | None) -> None:
    """The gateway's parts, on the manager's informers: routing, scaling (when on), the activator, the server."""
    metrics = GatewayMetrics()
    catalog = Catalog.watch(manager.informers, args.gateway_service)
    ModelReadiness(catalog, metrics.registry)
    recorder = manager.event_recorder("llmaz-gateway")
    in_flight = InFlight()
    scale = None
    if args.scale_to_zero == "true":
        scale = PlaygroundScale(manager.client, recorder)
        manager.add(idle_controller(IdleDetector(catalog, scale, in_flight), catalog, in_flight))
    waker = Waker(catalog, scale)
    # Runs when disabled too: it then removes the slices an earlier configuration left behind.
    options = ActivatorOptions(port=activator_port(args), gateway_service=args.gateway_service)
    manager.add(activator_controller(Activator(manager.client, catalog, recorder, options), catalog))
    signals = engine_signals(args, catalog, metrics.registry)
    if signals is not None:
        manager.add(signals)
    gateway = Gateway(
        catalog,
        gateway_options(args),
        api_keys=api_keys,
        metrics=metrics,
        in_flight=in_flight,
        waker=waker,
        signals=signals,
        adapters=signals,
    )
    manager.add(gateway)
    manager.add_readyz_check("gateway", gateway.serving)
    autoscaling = autoscaler_options(args)
    if autoscaling is not None:
        engine_load: LoadSignals = signals or NoSignals()
        metrics_of_autoscaler = AutoscalerMetrics(metrics.registry)
        manager.add(
            Autoscaler(catalog, manager.client, recorder, engine_load, in_flight, autoscaling, metrics_of_autoscaler)
        )
    if args.metrics_bind_address != "0":
        manager.add(MetricsServer(args.metrics_bind_address, secure=False, registry=metrics.registry))


async def run(args: argparse.Namespace, api_keys: ApiKeys | None) -> None:
    options = ManagerOptions(
        health_probe_bind_address=args.health_probe_bind_address,
        graceful_shutdown_timeout=args.drain_timeout + SHUTDOWN_MARGIN,
    )
    await run_manager(await load(args.kubeconfig), options, lambda manager: add_runnables(manager, args, api_keys))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logger = start_logging(args, "llmaz.gateway")
    try:
        api_keys = load_api_keys(args.api_keys_file)
    except (OSError, UnicodeDecodeError) as err:
        logger.error("cannot read the API keys file", path=str(args.api_keys_file), error=str(err))
        return 1
    logger.info(
        "starting gateway",
        bind_address=args.bind_address,
        activator_port=activator_port(args),
        gateway_service=args.gateway_service,
        api_keys=api_keys is not None,
        engine_metrics_interval=args.engine_metrics_interval,
        autoscaler=args.autoscaler == "true",
    )
    return exit_status(run(args, api_keys), logger, "gateway")


if __name__ == "__main__":
    sys.exit(main())
