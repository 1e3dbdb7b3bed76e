"""The llmaz webhooks served locally (TLS from the certificate rotator) and registered with the test API
server by URL, with unique configuration names, removed again before the server stops."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest_asyncio

from llmaz.certs import CertRotator, RotatorOptions
from llmaz.certs.inject import MUTATING, VALIDATING
from llmaz.runtime.client import ApiError, Client, NotFound
from llmaz.runtime.resource import Resource
from llmaz.runtime.webhook import WebhookServer, WebhookType, configuration
from llmaz.webhooks import ReferenceLookup, StaticLookup, webhooks
from llmaz_dev.envtest._cluster import Cluster
from llmaz_dev.testing.runnables import started
from llmaz_dev.testing.waiting import eventually

OPENMODELS = Resource("llmaz.io", "v1alpha1", "openmodels", "OpenModel", namespaced=False)
PLAYGROUNDS = Resource("inference.llmaz.io", "v1alpha1", "playgrounds", "Playground", namespaced=True)


def openmodel(name: str, **source: Any) -> dict[str, Any]:
    return {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": {"name": name},
        "spec": {"familyName": "qwen2", "source": source or {"modelHub": {"modelID": "Qwen/Qwen2-0.5B-Instruct"}}},
    }


@dataclass
class Webhooks:
    server: WebhookServer
    rotator: CertRotator
    configurations: dict[WebhookType, str]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def serving(
    client: Client, namespace: str, cert_dir: Path, lookup: ReferenceLookup | None, **options: Any
) -> AsyncIterator[Webhooks]:
    port = free_port()
    hooks = webhooks(lookup)
    names = {
        WebhookType.MUTATING: f"llmaz-mutating-{namespace}",
        WebhookType.VALIDATING: f"llmaz-validating-{namespace}",
    }
    server = WebhookServer(hooks, host="127.0.0.1", port=port, cert_dir=cert_dir, cert_poll_interval=0.5)
    opts = RotatorOptions(
        namespace=namespace,
        cert_dir=cert_dir,
        mutating_configurations=(names[WebhookType.MUTATING],),
        validating_configurations=(names[WebhookType.VALIDATING],),
        ip_addresses=("127.0.0.1",),
        check_interval=5.0,
        propagation_delay=2.0,
    )
    rotator = CertRotator(client, replace(opts, **options), on_files_written=server.certs.reload)
    for kind, name in names.items():
        resource = MUTATING if kind is WebhookType.MUTATING else VALIDATING
        await client.create(resource, configuration(kind, name, hooks, url=f"https://127.0.0.1:{port}"))
    async with started(rotator, server):
        try:
            await asyncio.wait_for(rotator.wait_ready(), 60)
            await asyncio.wait_for(server.wait_started(), 30)
            await eventually(lambda: _denies(client), 20, "the API server calls the webhooks")
            yield Webhooks(server, rotator, names)
        finally:
            for kind, name in names.items():
                with contextlib.suppress(NotFound):
                    await client.delete(MUTATING if kind is WebhookType.MUTATING else VALIDATING, name)


async def _denies(client: Client) -> bool:
    try:
        await client.create(OPENMODELS, openmodel("probe", uri="nothing"), dry_run=True)
    except ApiError as exc:
        return "vopenmodel.kb.io" in exc.message
    return False


LOOKUP = StaticLookup(backends={"vllm": ["default"]}, models={"qwen2-0-5b"})


@pytest_asyncio.fixture
async def client(kubeconfig: Path) -> AsyncIterator[Client]:
    c = await Client.from_kubeconfig(kubeconfig)
    yield c
    await c.close()


@pytest_asyncio.fixture
async def admission(client: Client, namespace: str, tmp_path: Path) -> AsyncIterator[Webhooks]:
    async with serving(client, namespace, tmp_path / "certs", LOOKUP) as hooks:
        yield hooks


@dataclass(frozen=True)
class KubectlResult:
    returncode: int
    stdout: str
    stderr: str


async def kubectl(cluster: Cluster, *args: str, input: str | None = None) -> KubectlResult:
    """kubectl against the test cluster, without blocking the loop the webhook server runs on."""
    assert cluster.kubectl_path is not None, "no kubectl: run `make cluster-bins`"
    argv = [str(cluster.kubectl_path), f"--kubeconfig={cluster.kubeconfig}", *args]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate(input.encode() if input is not None else None)
    return KubectlResult(proc.returncode or 0, out.decode(), err.decode())
