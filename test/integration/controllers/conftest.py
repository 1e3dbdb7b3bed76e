"""The llmaz manager running in-process (webhooks off) against the real control plane.

The LeaderWorkerSet controller does not run here: tests drive LWS status through its status subresource, as
llmaz's own integration suites do.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from llmaz.apis import resources as r
from llmaz.controllers.setup import ControllerSettings, setup_controllers
from llmaz.runtime.client import Client
from llmaz.runtime.manager import Manager, ManagerOptions
from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.waiting import eventually

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def llmaz_defaults(control_plane: Cluster) -> None:
    """The default BackendRuntimes and a valid global ConfigMap, as `make dev-up` installs them."""
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "config" / "dev"))


# What the controllers make or act on in a test's namespace. With no namespace controller running these would
# outlive their test, and every later test's manager would reconcile them again (and keep retrying what a
# Terminating namespace refuses, when a test ended before its objects converged).
_NAMESPACED_WORKLOADS = (
    r.PLAYGROUNDS,
    r.INFERENCE_SERVICES,
    r.LEADER_WORKER_SETS,
    r.SERVICES,
    r.HORIZONTAL_POD_AUTOSCALERS,
    r.PODS,
)


@pytest_asyncio.fixture
async def namespace(control_plane: Cluster, client: Client, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh namespace, emptied of the controllers' objects afterwards."""
    name = control_plane.create_namespace(request.node.name)
    yield name
    # The namespace goes first: once it is Terminating, a still-running manager cannot create anything in it.
    control_plane.delete_namespace(name)
    for resource in _NAMESPACED_WORKLOADS:
        await client.delete_collection(resource, name)


@pytest_asyncio.fixture
async def client(kubeconfig: Path) -> AsyncIterator[Client]:
    c = await Client.from_kubeconfig(kubeconfig)
    yield c
    await c.close()


@pytest_asyncio.fixture
async def manager(kubeconfig: Path, llmaz_defaults: None) -> AsyncIterator[Manager]:
    """A running manager with the four llmaz controllers; stopped (and drained) after the test."""
    manager_client = await Client.from_kubeconfig(kubeconfig)
    running = Manager(manager_client, ManagerOptions(health_probe_bind_address=None, graceful_shutdown_timeout=10))
    setup_controllers(running, ControllerSettings(max_concurrent_reconciles=2))
    stopping = asyncio.Event()
    task = asyncio.create_task(running.start(stopping))
    try:
        await eventually(lambda: _synced(running, task), within=30, what="the manager's caches to sync")
        yield running
    finally:
        stopping.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=20)
        await manager_client.close()


def _synced(manager: Manager, task: asyncio.Task[None]) -> bool:
    if task.done():
        task.result()  # it failed: no point waiting
    return manager.informers.has_synced()
