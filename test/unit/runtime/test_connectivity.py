"""Lost connectivity to the API server: one warning when requests stop reaching it, one info line when they do again."""

from __future__ import annotations

import contextlib

from structlog.testing import capture_logs

from llmaz.runtime.client import ApiConnectionError, Client, RestConfig
from llmaz.runtime.client.connectivity import Connectivity
from llmaz.runtime.resource import Resource
from llmaz_dev.testing.clock import FakeClock

CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)


def test_a_loss_is_logged_once_as_a_warning_and_the_return_once_as_info() -> None:
    clock = FakeClock()
    connectivity = Connectivity("10.0.0.1:6443", clock)
    with capture_logs() as logs:
        connectivity.reached()
        connectivity.failed("connection refused")
        clock.step(5)
        connectivity.failed("connection refused")
        connectivity.failed("no route to host")
        assert connectivity.describe() == "API server 10.0.0.1:6443 unreachable for 5s: no route to host"
        clock.step(7)
        connectivity.reached()
        connectivity.reached()
    assert [(log["log_level"], log["event"]) for log in logs] == [
        ("warning", "lost connection to the API server"),
        ("info", "API server reachable again"),
    ]
    assert logs[0]["error"] == "connection refused"
    assert logs[1]["lost_seconds"] == 12.0
    assert not connectivity.lost
    assert connectivity.describe() == ""


async def test_requests_that_cannot_reach_the_server_mark_the_client_disconnected() -> None:
    client = Client(RestConfig(host="http://127.0.0.1:1", qps=0, timeout=5))
    try:
        with capture_logs() as logs:
            for _ in range(2):
                with contextlib.suppress(ApiConnectionError):
                    await client.get(CONFIG_MAPS, "x", "ns")
        assert client.connectivity.lost
        assert client.guarded(lambda: None).connectivity is client.connectivity
        assert [log["event"] for log in logs] == ["lost connection to the API server"]
    finally:
        await client.close()
