"""Bind addresses: `host:port` with IPv6 in brackets, and every server really listening on IPv6 loopback and
dual-stack (loopback only)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson
import pytest

from llmaz.certs import ensure_self_signed
from llmaz.manager.__main__ import parse_args
from llmaz.runtime.client import Client
from llmaz.runtime.server.address import bind_socket, join_host_port, split_host_port
from llmaz.runtime.server.authn import DelegatingAuth
from llmaz.runtime.server.healthz import HealthProbeServer
from llmaz.runtime.server.metrics_server import MetricsServer
from llmaz.runtime.webhook import WebhookServer
from llmaz.webhooks import webhooks
from llmaz_dev.testing.runnables import running
from llmaz_dev.testing.servers import READER_TOKEN, FakeReviewer


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        (":8081", ("", 8081)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:8081", ("::1", 8081)),
        ("[::]:9443", ("::", 9443)),
        ("[fe80::1%eth0]:80", ("fe80::1%eth0", 80)),
        ("localhost:65535", ("localhost", 65535)),
    ],
)
def test_addresses_split_as_go_splits_them(address: str, parsed: tuple[str, int]) -> None:
    assert split_host_port(address) == parsed
    assert split_host_port(join_host_port(*parsed)) == parsed


@pytest.mark.parametrize(
    ("address", "error"),
    [
        ("::1:8081", "must be in brackets"),
        ("8081", "missing port"),
        ("[::1]8081", r"\[host\]:port"),
        ("[::1", r"\[host\]:port"),
        ("host:http", "port must be a number"),
        ("host:65536", "port must be a number"),
        ("host:-1", "port must be a number"),
    ],
)
def test_malformed_addresses_are_refused_with_the_reason(address: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        split_host_port(address)


@pytest.mark.parametrize("host", ["", "::", "[::]"])
def test_every_interface_is_one_dual_stack_socket(host: str) -> None:
    with bind_socket(host, 0) as sock:
        assert sock.family == socket.AF_INET6
        assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0


def test_an_ipv4_host_binds_ipv4_only() -> None:
    with bind_socket("127.0.0.1", 0) as sock:
        assert sock.family == socket.AF_INET


def bound(args: Any, flag: str) -> tuple[str, int] | str:
    """Where the server of a `host:port` flag listens: (host, port), or "0" when the flag turns it off."""
    value = cast(str, getattr(args, flag))
    return value if value == "0" else split_host_port(value)


def test_manager_flags_take_ipv6_addresses() -> None:
    args = parse_args(["--metrics-bind-address", "[::1]:8443", "--health-probe-bind-address", "[::]:8081"])
    assert bound(args, "metrics_bind_address") == ("::1", 8443)
    assert bound(args, "health_probe_bind_address") == ("::", 8081)
    assert parse_args(["--webhook-bind-host", "::"]).webhook_bind_host == "::"
    assert bound(parse_args(["--metrics-bind-address", "0"]), "metrics_bind_address") == "0"


@pytest.mark.parametrize("flag", ["--metrics-bind-address", "--health-probe-bind-address"])
def test_manager_flags_refuse_an_unbracketed_ipv6_address(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([flag, "::1:8443"])
    assert "must be in brackets" in capsys.readouterr().err


def test_manager_flags_default_to_every_interface_and_check_the_webhook_limits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = parse_args([])
    assert (args.webhook_bind_host, args.health_probe_bind_address) == ("", ":8081")
    assert (args.webhook_limits.max_requests, args.webhook_limits.read_timeout) == (32, 10.0)
    assert parse_args(["--webhook-read-timeout", "2s"]).webhook_limits.read_timeout == 2.0
    with pytest.raises(SystemExit):
        parse_args(["--webhook-max-in-flight-bytes", "1024"])
    assert "at least one maximum-size review" in capsys.readouterr().err


async def get(url: str, **options: Any) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as session, session.get(url, **options) as resp:
        return resp.status, await resp.read()


@pytest.mark.parametrize(("address", "clients"), [("[::1]:0", ["[::1]"]), (":0", ["[::1]", "127.0.0.1"])])
async def test_the_probe_server_listens_on_ipv6(address: str, clients: list[str]) -> None:
    probes = HealthProbeServer(address)
    async with running(probes):
        for host in clients:
            assert await get(f"http://{host}:{probes.port}/healthz") == (200, b"ok")


async def test_the_metrics_server_listens_on_ipv6_with_tls_and_auth(tmp_path: Path) -> None:
    ensure_self_signed(tmp_path, ["localhost"], ["::1"])
    auth = DelegatingAuth(cast(Client, FakeReviewer()))
    metrics = MetricsServer("[::1]:0", auth=auth, cert_dir=tmp_path)
    async with running(metrics):
        headers = {"Authorization": f"Bearer {READER_TOKEN}"}
        # Unverified, as scrapers are configured for the self-signed certificate.
        status, body = await get(f"https://[::1]:{metrics.port}/metrics", ssl=False, headers=headers)
        assert status == 200
        assert b"# TYPE " in body


@pytest.mark.parametrize(("host", "clients"), [("[::1]", ["[::1]"]), ("::", ["[::1]", "127.0.0.1"])])
async def test_the_webhook_server_listens_on_ipv6(host: str, clients: list[str]) -> None:
    server = WebhookServer(webhooks(), host=host, port=0, tls=False)
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "v6"}}
    async with running(server):
        for client in clients:
            async with (
                aiohttp.ClientSession() as session,
                session.post(f"http://{client}:{server.port}/validate-llmaz-io-v1alpha1-openmodel",
                             data=orjson.dumps(review), headers={"Content-Type": "application/json"}) as resp,
            ):  # fmt: skip
                assert resp.status == 200
                assert orjson.loads(await resp.read())["response"]["uid"] == "v6"
