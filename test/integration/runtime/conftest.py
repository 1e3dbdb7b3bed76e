"""Fixtures for runtime tests against the envtest control plane: a client and a polling helper."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from llmaz.runtime.client import Client


@pytest_asyncio.fixture
async def client(kubeconfig: Path) -> AsyncIterator[Client]:
    c = await Client.from_kubeconfig(kubeconfig)
    yield c
    await c.close()
