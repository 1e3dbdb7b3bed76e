"""The development Envoy's bootstrap (llmaz_dev.envoy): the product's behind the endpoint picker, on loopback, or
alone in front of one engine, the gateway benchmark's floor."""

from __future__ import annotations

from typing import Any

from llmaz.gateway import envoy as data_plane
from llmaz_dev.envoy import DESTINATION_HEADER, alone, bootstrap


def _filters(config: dict[str, Any]) -> list[str]:
    (listener,) = config["static_resources"]["listeners"]
    (chain,) = listener["filter_chains"]
    (manager,) = chain["filters"]
    return [f["name"] for f in manager["typed_config"]["http_filters"]]


def _manager(config: dict[str, Any]) -> dict[str, Any]:
    (listener,) = config["static_resources"]["listeners"]
    manager: dict[str, Any] = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return manager


def _clusters(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in config["static_resources"]["clusters"]}


def _port(cluster: dict[str, Any]) -> int:
    (group,) = cluster["load_assignment"]["endpoints"]
    (endpoint,) = group["lb_endpoints"]
    return int(endpoint["endpoint"]["address"]["socket_address"]["port_value"])


def test_behind_the_picker_envoy_asks_it_and_connects_where_its_header_says() -> None:
    config = bootstrap(8000, 8001, 9002)
    assert _filters(config) == ["envoy.filters.http.ext_proc", "envoy.filters.http.router"]
    clusters = _clusters(config)
    assert clusters["engines"]["type"] == "ORIGINAL_DST"
    assert clusters["engines"]["original_dst_lb_config"]["http_header_name"] == DESTINATION_HEADER
    assert _port(clusters["epp"]) == 9002


def test_alone_envoy_routes_every_request_to_the_one_engine_without_ext_proc() -> None:
    config = alone(8000, 8001, 7000)
    assert _filters(config) == ["envoy.filters.http.router"]
    clusters = _clusters(config)
    assert set(clusters) == {"engines"}
    assert clusters["engines"]["type"] == "STATIC"
    assert "original_dst_lb_config" not in clusters["engines"]
    assert _port(clusters["engines"]) == 7000
    (listener,) = config["static_resources"]["listeners"]
    assert listener["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 8000}
    assert config["admin"]["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 8001}


def test_alone_keeps_the_products_listener_timeouts_and_buffer_bounds() -> None:
    config, product = alone(8000, 8001, 7000), bootstrap(8000, 8001, 9002)
    manager, products = _manager(config), _manager(product)
    assert {k: v for k, v in manager.items() if k != "http_filters"} == {
        k: v for k, v in products.items() if k != "http_filters"
    }
    assert manager["stream_idle_timeout"] == f"{data_plane.STREAM_IDLE_SECONDS}s"
    engines, products_engines = _clusters(config)["engines"], _clusters(product)["engines"]
    for key in ("connect_timeout", "per_connection_buffer_limit_bytes"):
        assert engines[key] == products_engines[key]
