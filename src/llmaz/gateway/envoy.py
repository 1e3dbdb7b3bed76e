"""The Envoy data plane of llmaz-gateway: Envoy's static bootstrap, in front of the gateway's Endpoint Picker.

Envoy serves the OpenAI API; for each request its ext_proc filter asks the Endpoint Picker (`--epp-port`) which
engine takes it, and its ORIGINAL_DST cluster connects to the address the picker names in
`x-gateway-destination-endpoint`. One builder, two address sets: `POD` (the install variant: Envoy beside
llmaz-gateway in its pod, config/gateway-envoy and the chart's `gateway.dataPlane: envoy`) and `loopback` (tests).

    python -m llmaz.gateway.envoy [--body-mode BUFFERED|FULL_DUPLEX_STREAMED] [--failure-mode FailClose|FailOpen]
                                  [--picker-timeout SECONDS]

prints the pod's bootstrap (JSON, which Envoy reads as YAML), for a kustomize install that wants other modes.

Choices, all in `bootstrap`:
- body mode: BUFFERED (default) sends the picker the request headers, then the whole body once; FULL_DUPLEX_STREAMED
  streams the body to the picker as it arrives (Envoy then requires the trailers to be sent too: they may end it);
- failure mode (the Gateway API Inference Extension's `failureMode`): FailClose (default) refuses a request the picker
  cannot answer; FailOpen lets it through to Envoy's routing, which has no destination for it but the header;
- timeouts: no route timeout (Envoy's default of 15 s counts the whole response, and an LLM stream lasts minutes);
  instead a stream idle timeout equal to llmaz-gateway's `--upstream-timeout` default (300 s between two reads),
  so a stalled engine is cut as the Python proxy would cut it, and a live stream never is; the picker's answer is
  awaited longer than the picker holds a request (`--wake-timeout`, `--hold-timeout`), so a request held while its
  model wakes from zero is answered by the picker, never failed by Envoy first (`--picker-timeout` for a gateway
  run with longer holds);
- body size: the listener buffers up to the Python proxy's `--max-request-bytes` default (10 MiB), which a BUFFERED
  body must fit in (Envoy answers 413 above it);
- a request whose engine connection is reset before any answer (a kept-alive connection the engine closed just as
  Envoy reused it: llama.cpp closes one after each stream) is sent once more, on a new connection, as the Python
  proxy retries a pooled connection that lost that race; once an answer has begun nothing is retried;
- admin on loopback only; the kubelet's readiness probe reaches `/ready` alone, through a listener of its own that
  forwards that one path to the admin port.

Imports the standard library only: the image build, config generation and tests all read it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DESTINATION_HEADER = "x-gateway-destination-endpoint"
BODY_MODES = ("BUFFERED", "FULL_DUPLEX_STREAMED")
FAILURE_MODES = ("FailClose", "FailOpen")
DEFAULT_BODY_MODE = "BUFFERED"
DEFAULT_FAILURE_MODE = "FailClose"
READY_PATH = "/ready"
# The Python proxy's defaults (--upstream-timeout, --max-request-bytes); test/unit/gateway/test_envoy.py keeps them
# equal.
STREAM_IDLE_SECONDS = 300
MAX_BODY_BYTES = 10 * 1024 * 1024
# The gateway's --wake-timeout and --hold-timeout defaults (kept equal by the same test): the picker answers a request
# whose model wakes from zero after at most the first, one whose replicas are starting after at most the second.
WAKE_SECONDS = 300
HOLD_SECONDS = 30
# How long Envoy awaits the picker's answer to one ext_proc message (message_timeout). A picker answers at once (in
# milliseconds) unless it holds the request, and a picker that is down fails the request at once too (the
# connection is refused); only a held request or a hung picker runs into this bound. So it is the longest hold plus
# a margin for the picker's own answer at the hold's end (its 504 `model_wake_timeout` or 503 `model_not_ready`,
# which say why, instead of Envoy's bare 500): shorter, and a request held while its model wakes fails in Envoy
# first; much longer, and a hung picker keeps clients waiting for nothing.
PICKER_MARGIN_SECONDS = 10
PICKER_TIMEOUT_SECONDS = max(WAKE_SECONDS, HOLD_SECONDS) + PICKER_MARGIN_SECONDS
CONNECT_TIMEOUT = "5s"
HEADERS_TIMEOUT = "30s"


@dataclass(frozen=True)
class Address:
    host: str
    port: int


@dataclass(frozen=True)
class Addresses:
    """Where Envoy listens and what it calls: the API, its admin, the Endpoint Picker, the readiness listener."""

    api: Address
    admin: Address
    epp: Address
    ready: Address | None = None


# Envoy's retry condition for an attempt reset before its answer's headers.
RETRY_ON = "reset"

# In llmaz-gateway's pod: the API on the gateway's API port (the Service's `http`), the picker in the gateway
# container (same network namespace), admin on loopback, /ready for the kubelet on a port of its own.
API_PORT = 8000
ADMIN_PORT = 9901
EPP_PORT = 9002
READY_PORT = 9903
POD = Addresses(
    api=Address("0.0.0.0", API_PORT),
    admin=Address("127.0.0.1", ADMIN_PORT),
    epp=Address("127.0.0.1", EPP_PORT),
    ready=Address("0.0.0.0", READY_PORT),
)


def loopback(api_port: int, admin_port: int, epp_port: int, ready_port: int | None = None) -> Addresses:
    """Every address on 127.0.0.1: Envoy and the picker as local processes (tests, benchmarks)."""
    host = "127.0.0.1"
    ready = Address(host, ready_port) if ready_port is not None else None
    return Addresses(Address(host, api_port), Address(host, admin_port), Address(host, epp_port), ready)


def processing_mode(body_mode: str) -> dict[str, str]:
    """What ext_proc sends the picker: the request headers and body, nothing of the response."""
    _check("body_mode", body_mode, BODY_MODES)
    return {
        "request_header_mode": "SEND",
        "request_body_mode": body_mode,
        # Envoy requires the trailers sent with a full duplex body (they may end it).
        "request_trailer_mode": "SEND" if body_mode == "FULL_DUPLEX_STREAMED" else "SKIP",
        "response_header_mode": "SKIP",
        "response_body_mode": "NONE",
        "response_trailer_mode": "SKIP",
    }


def bootstrap(
    addresses: Addresses,
    *,
    body_mode: str = DEFAULT_BODY_MODE,
    failure_mode: str = DEFAULT_FAILURE_MODE,
    picker_timeout: int = PICKER_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """Envoy's static bootstrap (ValueError naming the field for a mode it does not know, or a picker timeout that
    is not a positive number of seconds)."""
    _check("failure_mode", failure_mode, FAILURE_MODES)
    if isinstance(picker_timeout, bool) or not isinstance(picker_timeout, int) or picker_timeout <= 0:
        raise ValueError(
            f"picker_timeout: {picker_timeout!r} is not a positive whole number of seconds; give one longer than the "
            "gateway's --wake-timeout and --hold-timeout"
        )
    # The per-message bound; the gRPC service's own `timeout` says the same (an ext_proc stream takes no deadline
    # from it), so that no reader of the bootstrap takes a shorter one for the picker's.
    timeout = f"{picker_timeout}s"
    ext_proc = {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
        "grpc_service": {"envoy_grpc": {"cluster_name": "epp"}, "timeout": timeout},
        "failure_mode_allow": failure_mode == "FailOpen",
        "message_timeout": timeout,
        "processing_mode": processing_mode(body_mode),
    }
    # An engine may close a kept-alive connection just as Envoy reuses it (llama.cpp closes after each stream):
    # that attempt is reset before any answer, and goes once more, on a new connection.
    retry = {"retry_on": RETRY_ON, "num_retries": 1}
    api_routes = [{"match": {"prefix": "/"}, "route": {"cluster": "engines", "timeout": "0s", "retry_policy": retry}}]
    api = _http_listener(
        "gateway",
        addresses.api,
        api_routes,
        [{"name": "envoy.filters.http.ext_proc", "typed_config": ext_proc}],
        {"stream_idle_timeout": f"{STREAM_IDLE_SECONDS}s", "request_headers_timeout": HEADERS_TIMEOUT},
    )
    api["per_connection_buffer_limit_bytes"] = MAX_BODY_BYTES
    listeners = [api]
    clusters = [
        {
            "name": "engines",
            "type": "ORIGINAL_DST",
            "lb_policy": "CLUSTER_PROVIDED",
            "connect_timeout": CONNECT_TIMEOUT,
            "per_connection_buffer_limit_bytes": MAX_BODY_BYTES,
            "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
        },
        _static_cluster("epp", addresses.epp, http2=True),
    ]
    if addresses.ready is not None:
        ready_routes = [{"match": {"path": READY_PATH}, "route": {"cluster": "admin"}}]
        listeners.append(_http_listener("ready", addresses.ready, ready_routes, [], {}))
        clusters.append(_static_cluster("admin", addresses.admin, http2=False))
    return {
        "admin": {"address": _socket(addresses.admin)},
        "static_resources": {"listeners": listeners, "clusters": clusters},
    }


def bootstrap_json(
    addresses: Addresses,
    *,
    body_mode: str = DEFAULT_BODY_MODE,
    failure_mode: str = DEFAULT_FAILURE_MODE,
    picker_timeout: int = PICKER_TIMEOUT_SECONDS,
) -> str:
    """`bootstrap` as the text of Envoy's configuration file: JSON, indented, one value per line."""
    config = bootstrap(addresses, body_mode=body_mode, failure_mode=failure_mode, picker_timeout=picker_timeout)
    return json.dumps(config, indent=2) + "\n"


def _positive_seconds(text: str) -> int:
    try:
        seconds = int(text)
    except ValueError:
        seconds = 0
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number of seconds")
    return seconds


def _check(field: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{field}: {value!r} is not one of {', '.join(allowed)}")


def _socket(address: Address) -> dict[str, Any]:
    return {"socket_address": {"address": address.host, "port_value": address.port}}


def _http_listener(
    name: str, address: Address, routes: list[dict[str, Any]], filters: list[dict[str, Any]], more: dict[str, Any]
) -> dict[str, Any]:
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
        ".HttpConnectionManager",
        "stat_prefix": name,
        **more,
        "route_config": {"virtual_hosts": [{"name": name, "domains": ["*"], "routes": routes}]},
        "http_filters": [
            *filters,
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
            },
        ],
    }
    chain = {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]}
    return {"name": name, "address": _socket(address), "filter_chains": [chain]}


def _static_cluster(name: str, address: Address, *, http2: bool) -> dict[str, Any]:
    cluster: dict[str, Any] = {"name": name, "type": "STATIC", "connect_timeout": CONNECT_TIMEOUT}
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    cluster["load_assignment"] = {
        "cluster_name": name,
        "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket(address)}}]}],
    }
    return cluster


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmaz.gateway.envoy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--body-mode", choices=BODY_MODES, default=DEFAULT_BODY_MODE)
    parser.add_argument("--failure-mode", choices=FAILURE_MODES, default=DEFAULT_FAILURE_MODE)
    parser.add_argument(
        "--picker-timeout",
        type=_positive_seconds,
        default=PICKER_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="seconds Envoy awaits the picker's answer: longer than the gateway's --wake-timeout and --hold-timeout "
        f"(default {PICKER_TIMEOUT_SECONDS})",
    )
    args = parser.parse_args(argv)
    text = bootstrap_json(
        POD, body_mode=args.body_mode, failure_mode=args.failure_mode, picker_timeout=args.picker_timeout
    )
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
