"""llmaz-gateway as a process (`python -m llmaz.gateway`) against the envtest API server, as its own
ServiceAccount bound to nothing but the generated config/gateway role, routing to a fake engine on 127.0.0.1.

No controller runs: the test creates the objects the controllers would have made (here only the `-lb`
Service's EndpointSlice, written by hand) and the gateway reads them as it would in a cluster. The API server
refuses loopback IPs in EndpointSlices, so the slice names the engine by a documentation address that routes
nowhere (ENGINE_ADDRESS, TEST-NET-1) and the gateway is started with `--resolve ENGINE_ADDRESS=127.0.0.1`,
its curl-like address override: everything else on the path is what runs in a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import pytest_asyncio
import yaml
from aiohttp import web

from llmaz_dev.envtest import Cluster
from llmaz_dev.envtest._process import ManagedProcess, free_loopback_ports
from llmaz_dev.testing.waiting import eventually

REPO = Path(__file__).resolve().parents[3]
SERVICE_ACCOUNT = "gateway"
ENGINE_ADDRESS = "192.0.2.10"


@dataclass
class Engine:
    """A fake OpenAI engine on 127.0.0.1: a chat completion, or an SSE stream that waits for `release`."""

    bodies: list[dict[str, Any]] = field(default_factory=list)
    traceparents: list[str | None] = field(default_factory=list)
    """Each request's `traceparent` header, None when it had none."""
    release: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.bodies.append(body)
        self.traceparents.append(request.headers.get("traceparent"))
        if not body.get("stream"):
            usage = {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
            return web.json_response({"object": "chat.completion", "model": body["model"], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n')
        await self.release.wait()
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


@contextlib.asynccontextmanager
async def loopback_server(app: web.Application) -> AsyncIterator[int]:
    """`app` served on a free loopback port, which it yields; stopped on the way out."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture
async def engine() -> AsyncIterator[Engine]:
    fake = Engine()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    async with loopback_server(app) as fake.port:
        try:
            yield fake
        finally:
            fake.release.set()


def gateway_rbac(namespace: str, account: str = SERVICE_ACCOUNT) -> list[tuple[str, dict[str, Any]]]:
    """The generated roles and bindings of them to the test's ServiceAccount `account`, as (collection path,
    object): the ClusterRole (renamed per test), and the Role of the autoscaler's Lease in the test's namespace,
    which stands for the gateway's own."""
    documents = [d for d in yaml.safe_load_all((REPO / "config" / "gateway" / "role.yaml").read_text()) if d]
    (cluster_role,) = [d for d in documents if d["kind"] == "ClusterRole"]
    (role,) = [d for d in documents if d["kind"] == "Role"]
    cluster_role["metadata"]["name"] = f"gateway-role-{namespace}"
    role["metadata"] = {"name": "gateway-role", "namespace": namespace}
    subjects = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    cluster_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"gateway-rolebinding-{namespace}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"gateway-role-{namespace}",
        },
        "subjects": subjects,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "gateway-rolebinding", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gateway-role"},
        "subjects": subjects,
    }
    return [
        (f"{rbac}/clusterroles", cluster_role),
        (f"{rbac}/clusterrolebindings", cluster_binding),
        (f"{rbac}/namespaces/{namespace}/roles", role),
        (f"{rbac}/namespaces/{namespace}/rolebindings", binding),
    ]


@dataclass(frozen=True)
class GatewayProcess:
    process: ManagedProcess
    api: str
    probe: str
    metrics: str
    activator_port: int
    """The activator listener's port (on 127.0.0.1), which the activator's EndpointSlices name."""


async def _ready(gateway: GatewayProcess, session: aiohttp.ClientSession) -> bool:
    if (code := gateway.process.exit_code()) is not None:
        raise RuntimeError(f"llmaz-gateway exited ({code}):\n{gateway.process.log_tail()}")
    try:
        async with session.get(gateway.probe + "/readyz") as resp:
            return resp.status == 200
    except aiohttp.ClientConnectionError:
        return False


@pytest.fixture
def gateway_kubeconfig(control_plane: Cluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig with a token of the test's `gateway` ServiceAccount, which has the gateway's role only."""
    admin = control_plane.admin_client()
    rbac = gateway_rbac(namespace)
    for collection, obj in rbac:
        admin.request("POST", collection, obj)
    token = control_plane.service_account_token(namespace, SERVICE_ACCOUNT)
    try:
        yield control_plane.write_kubeconfig(tmp_path / "kubeconfig", {"token": token})
    finally:
        for collection, obj in reversed(rbac):
            admin.request("DELETE", f"{collection}/{obj['metadata']['name']}")


# The gateway's own Service, as the activator is told (its slices are written by the test, in its namespace).
GATEWAY_SERVICE = "llmaz-gateway"


@contextlib.asynccontextmanager
async def running_gateway(
    kubeconfig: Path, namespace: str, log_path: Path, extra_args: Sequence[str] = ()
) -> AsyncIterator[GatewayProcess]:
    """`python -m llmaz.gateway` as the test's ServiceAccount, on free loopback ports, until it answers /readyz."""
    api, metrics, probe, activator = free_loopback_ports(4)
    argv = [
        sys.executable,
        "-m",
        "llmaz.gateway",
        f"--kubeconfig={kubeconfig}",
        f"--bind-address=127.0.0.1:{api}",
        f"--metrics-bind-address=127.0.0.1:{metrics}",
        f"--health-probe-bind-address=127.0.0.1:{probe}",
        f"--activator-port={activator}",
        f"--gateway-service={namespace}/{GATEWAY_SERVICE}",
        "--drain-timeout=20",
        f"--resolve={ENGINE_ADDRESS}=127.0.0.1",
        "--log-format=json",
        "--log-level=debug",
        *extra_args,
    ]
    process = ManagedProcess("llmaz-gateway", argv, log_path)
    process.start()
    running = GatewayProcess(
        process, f"http://127.0.0.1:{api}", f"http://127.0.0.1:{probe}", f"http://127.0.0.1:{metrics}", activator
    )
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            await eventually(lambda: _ready(running, session), within=60, what="llmaz-gateway /readyz")
        yield running
    finally:
        process.stop()


@pytest_asyncio.fixture
async def gateway(gateway_kubeconfig: Path, namespace: str, tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    async with running_gateway(gateway_kubeconfig, namespace, tmp_path / "gateway.log") as running:
        yield running
