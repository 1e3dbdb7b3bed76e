"""A manager of a test's own, started and stopped around a block, and its /readyz."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from llmaz.controllers.setup import ControllerSettings, setup_controllers
from llmaz.runtime.client import Client
from llmaz.runtime.manager import Manager, ManagerOptions


@contextlib.asynccontextmanager
async def manager_running(
    kubeconfig: Path, settings: ControllerSettings, cache_sync_timeout: float = 60.0
) -> AsyncIterator[Manager]:
    """A manager with the llmaz controllers and probes on a free port, stopped afterwards."""
    client = await Client.from_kubeconfig(kubeconfig)
    try:
        options = ManagerOptions(
            health_probe_bind_address="127.0.0.1:0", cache_sync_timeout=cache_sync_timeout, graceful_shutdown_timeout=10
        )
        manager = Manager(client, options)
        setup_controllers(manager, settings)
        stopping = asyncio.Event()
        task = asyncio.create_task(manager.start(stopping))
        try:
            await asyncio.wait_for(manager.health.wait_started(), 10)
            yield manager
            assert not task.done(), "the manager stopped by itself"
        finally:
            stopping.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=20)
    finally:
        await client.close()


async def readyz(manager: Manager) -> tuple[int, list[str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{manager.health.port}/readyz?verbose") as resp,
    ):
        return resp.status, (await resp.text()).splitlines()
