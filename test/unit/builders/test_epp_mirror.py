"""The endpoint picker's Service and mirrored EndpointSlice in a pool's namespace: a selector-less Service on 9002
(h2c), and a slice listing exactly the ready endpoints of the gateway's picker slices on their grpc port."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.controllers.builders.epp import build_epp_service, build_epp_slice


def _source(*endpoints: dict[str, Any], port: int = 9002, name: str = "grpc", family: str = "IPv4") -> dict[str, Any]:
    return {
        "metadata": {"name": "llmaz-gateway-epp-x", "namespace": "llmaz-system"},
        "addressType": family,
        "ports": [{"name": name, "port": port, "protocol": "TCP"}],
        "endpoints": list(endpoints),
    }


def _endpoint(address: str, ready: bool | None = True, terminating: bool | None = None) -> dict[str, Any]:
    conditions: dict[str, Any] = {}
    if ready is not None:
        conditions["ready"] = ready
    if terminating is not None:
        conditions["terminating"] = terminating
    return {"addresses": [address], "conditions": conditions}


def test_the_service_has_no_selector_and_serves_grpc_over_h2c_on_9002() -> None:
    assert build_epp_service("team-a") == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "llmaz-epp", "namespace": "team-a", "labels": {"app.kubernetes.io/managed-by": "llmaz"}},
        "spec": {
            "type": "ClusterIP",
            "ports": [
                {
                    "name": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "kubernetes.io/h2c",
                    "port": 9002,
                    "targetPort": 9002,
                }
            ],
        },
    }


def test_the_slice_belongs_to_the_service_and_is_not_the_endpointslice_controllers() -> None:
    slice_ = build_epp_slice("team-a", [_source(_endpoint("10.0.0.1"))])
    assert slice_["metadata"] == {
        "name": "llmaz-epp",
        "namespace": "team-a",
        "labels": {
            "app.kubernetes.io/managed-by": "llmaz",
            "kubernetes.io/service-name": "llmaz-epp",
            "endpointslice.kubernetes.io/managed-by": "epp-mirror.llmaz.io",
        },
    }
    assert slice_["addressType"] == "IPv4"
    assert slice_["ports"] == [{"name": "grpc", "protocol": "TCP", "appProtocol": "kubernetes.io/h2c", "port": 9002}]
    assert slice_["endpoints"] == [{"addresses": ["10.0.0.1"], "conditions": {"ready": True}}]


@pytest.mark.parametrize(
    ("sources", "addresses"),
    [
        ([], []),
        ([_source()], []),
        ([_source(_endpoint("10.0.0.2"), _endpoint("10.0.0.1"))], ["10.0.0.1", "10.0.0.2"]),
        ([_source(_endpoint("10.0.0.1", ready=False))], []),
        ([_source(_endpoint("10.0.0.1", ready=None))], ["10.0.0.1"]),  # unknown counts as ready
        ([_source(_endpoint("10.0.0.1", terminating=True))], []),
        (
            [_source(_endpoint("10.0.0.1")), _source(_endpoint("10.0.0.1"), _endpoint("10.0.0.3"))],
            ["10.0.0.1", "10.0.0.3"],
        ),
        ([_source(_endpoint("fd00::1"), family="IPv6")], []),
        ([_source(_endpoint("10.0.0.1"), name="health", port=9003)], []),
    ],
)
def test_the_slice_lists_the_ready_endpoints_sorted_and_once(
    sources: list[dict[str, Any]], addresses: list[str]
) -> None:
    endpoints = build_epp_slice("ns", sources)["endpoints"]
    assert [e["addresses"][0] for e in endpoints] == addresses
    assert all(e["conditions"] == {"ready": True} for e in endpoints)


def test_the_slice_takes_the_sources_port() -> None:
    slice_ = build_epp_slice("ns", [_source(_endpoint("10.0.0.1"), port=19002)])
    assert slice_["ports"][0]["port"] == 19002
