"""The secure metrics endpoint: 401 without a valid token, 403 without `get /metrics`, 200 with it."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest_asyncio
import yaml

from llmaz.certs import ensure_self_signed
from llmaz.runtime.client import Client
from llmaz.runtime.resource import Resource
from llmaz.runtime.server.authn import CacheTTLs, DelegatingAuth
from llmaz.runtime.server.metrics_server import MetricsServer
from llmaz_dev.envtest._cluster import Cluster
from llmaz_dev.testing.runnables import running
from llmaz_dev.testing.waiting import eventually

REPO = Path(__file__).resolve().parents[3]
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False)


@pytest_asyncio.fixture
async def metrics(client: Client, tmp_path: Path) -> AsyncIterator[MetricsServer]:
    ensure_self_signed(tmp_path, ["localhost"], ["127.0.0.1"])
    auth = DelegatingAuth(client, CacheTTLs(unauthenticated=0.2, denied=0.2))
    async with running(MetricsServer("127.0.0.1:0", auth=auth, cert_dir=tmp_path)) as server:
        yield server


async def scrape(server: MetricsServer, token: str | None) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a self-signed certificate nobody pins, as scrapers are configured
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"https://127.0.0.1:{server.port}/metrics", ssl=context, headers=headers) as resp,
    ):
        return resp.status, await resp.text()


async def test_metrics_need_an_authenticated_and_authorized_caller(
    metrics: MetricsServer, client: Client, control_plane: Cluster, namespace: str
) -> None:
    reader = await asyncio.to_thread(control_plane.service_account_token, namespace, "reader")
    stranger = await asyncio.to_thread(control_plane.service_account_token, namespace, "stranger")
    role = yaml.safe_load((REPO / "config/rbac/metrics_reader_role.yaml").read_text())
    role["metadata"]["name"] = name = f"metrics-reader-{namespace}"
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
    }
    await client.create(CLUSTER_ROLES, role)
    await client.create(BINDINGS, binding)
    try:
        assert (await scrape(metrics, None))[0] == 401
        assert (await scrape(metrics, "not-a-token"))[0] == 401
        assert (await scrape(metrics, stranger))[0] == 403

        async def scraped_by_reader() -> str | None:
            status, body = await scrape(metrics, reader)
            return body if status == 200 else None

        # The authorizer sees the new binding within moments.
        body = await eventually(scraped_by_reader, within=10, interval=0.2, what="the reader's scrape allowed")
        assert "# TYPE " in body
        assert (await scrape(metrics, stranger))[0] == 403
    finally:
        for resource in (BINDINGS, CLUSTER_ROLES):
            with contextlib.suppress(Exception):
                await client.delete(resource, name)
