"""Manager start/stop order, failure handling and grace period, without leader election or informers."""

from __future__ import annotations

import asyncio
import gc
import os
import signal

import aiohttp
import pytest

from llmaz.runtime.cache import CacheSyncTimeoutError
from llmaz.runtime.client import ApiConnectionError, Client, RestConfig
from llmaz.runtime.manager import LeadershipLostError, Manager, ManagerOptions
from llmaz.runtime.resource import Resource
from llmaz.runtime.runnable import grace_remains, until_cancelled

UNREACHABLE = "http://127.0.0.1:1"


class Tracked:
    """A runnable that logs its start and stop into a shared journal."""

    def __init__(self, name: str, journal: list[str], *, leader: bool, drain: float = 0.0) -> None:
        self.name = name
        self.needs_leader_election = leader
        self._journal = journal
        self._drain = drain
        self.started = asyncio.Event()

    async def run(self) -> None:
        self._journal.append(f"start {self.name}")
        self.started.set()
        try:
            await until_cancelled()
        finally:
            await self._wind_down()

    async def _wind_down(self) -> None:
        if not grace_remains():
            self._journal.append(f"abandoned {self.name}")
            return
        try:
            await asyncio.sleep(self._drain)
        except asyncio.CancelledError:
            self._journal.append(f"cancelled {self.name}")
            raise
        self._journal.append(f"stop {self.name}")


class WithStopEvent:
    """A runnable on the earlier interface: it waits for its stop event, then winds down."""

    needs_leader_election = True

    def __init__(self, journal: list[str]) -> None:
        self._journal = journal
        self.started = asyncio.Event()

    async def run(self, stopping: asyncio.Event) -> None:
        self.started.set()
        await stopping.wait()
        await asyncio.sleep(0)  # a wind-down that takes a step
        self._journal.append("stopped by its event")


class Failing:
    needs_leader_election = True

    async def run(self) -> None:
        raise RuntimeError("reconciler crashed")


async def start_then_stop(mgr: Manager, started: asyncio.Event) -> None:
    """Start `mgr`, stop it once a runnable has set `started`, and wait until it has stopped."""
    stopping = asyncio.Event()
    run = asyncio.create_task(mgr.start(stopping))
    await asyncio.wait_for(started.wait(), 5)
    stopping.set()
    await asyncio.wait_for(run, 5)


def manager(**options: object) -> Manager:
    opts = ManagerOptions(health_probe_bind_address=None, **options)  # type: ignore[arg-type]
    return Manager(Client(RestConfig(host=UNREACHABLE)), opts)


async def test_servers_start_before_leader_runnables_and_stop_after_them() -> None:
    journal: list[str] = []
    mgr = manager()
    controller = Tracked("controller", journal, leader=True)
    webhook = Tracked("webhook", journal, leader=False)
    mgr.add(controller)
    mgr.add(webhook)
    await start_then_stop(mgr, controller.started)
    assert journal == ["start webhook", "start controller", "stop controller", "stop webhook"]


async def test_a_failing_runnable_stops_the_manager_and_its_error_is_raised() -> None:
    journal: list[str] = []
    mgr = manager()
    mgr.add(Tracked("webhook", journal, leader=False))
    mgr.add(Failing())
    with pytest.raises(RuntimeError, match="reconciler crashed"):
        await asyncio.wait_for(mgr.start(asyncio.Event()), 5)
    assert journal == ["start webhook", "stop webhook"]


async def test_runnables_overrunning_the_grace_period_are_cancelled() -> None:
    journal: list[str] = []
    mgr = manager(graceful_shutdown_timeout=0.2)
    slow = Tracked("slow", journal, leader=True, drain=60)
    mgr.add(slow)
    await start_then_stop(mgr, slow.started)
    assert journal == ["start slow", "cancelled slow"]


async def test_with_no_grace_period_runnables_stop_without_winding_down() -> None:
    journal: list[str] = []
    mgr = manager(graceful_shutdown_timeout=0)
    mgr.add(slow := Tracked("slow", journal, leader=True, drain=60))
    mgr.add(Tracked("webhook", journal, leader=False, drain=60))
    await start_then_stop(mgr, slow.started)
    assert journal == ["start webhook", "start slow", "abandoned slow", "abandoned webhook"]


async def test_a_runnable_with_a_stop_event_still_runs_and_its_event_is_set_on_the_stop() -> None:
    journal: list[str] = []
    mgr = manager()
    mgr.add(legacy := WithStopEvent(journal))
    await start_then_stop(mgr, legacy.started)
    assert journal == ["stopped by its event"]


async def test_leader_runnables_wait_for_informer_sync_and_a_sync_timeout_is_a_clear_error() -> None:
    journal: list[str] = []
    mgr = manager(cache_sync_timeout=0.3)
    mgr.informers.informer_for(Resource("", "v1", "pods", "Pod", namespaced=True))
    mgr.add(Tracked("controller", journal, leader=True))
    with pytest.raises(CacheSyncTimeoutError, match=r"pods\.v1"):
        await asyncio.wait_for(mgr.start(asyncio.Event()), 10)
    assert journal == []


async def test_readiness_reports_informers_unsynced_while_caches_fill() -> None:
    mgr = Manager(
        Client(RestConfig(host=UNREACHABLE)),
        ManagerOptions(health_probe_bind_address="127.0.0.1:0", cache_sync_timeout=30),
    )
    mgr.informers.informer_for(Resource("", "v1", "pods", "Pod", namespaced=True))
    stopping = asyncio.Event()
    run = asyncio.create_task(mgr.start(stopping))
    await asyncio.wait_for(mgr.health.wait_started(), 5)
    async with aiohttp.ClientSession() as session:
        base = f"http://127.0.0.1:{mgr.health.port}"
        async with session.get(f"{base}/readyz?verbose") as resp:
            assert resp.status == 500
            assert "[-]informers failed" in await resp.text()
        async with session.get(f"{base}/healthz") as resp:
            assert resp.status == 200
    stopping.set()
    await asyncio.wait_for(run, 5)


@pytest.mark.parametrize("freeze", [True, False])
async def test_the_heap_is_frozen_after_cache_sync_before_controllers_start_when_asked(freeze: bool) -> None:
    class FreezeWitness:
        needs_leader_election = True
        frozen_at_start = -1
        started = asyncio.Event()

        async def run(self) -> None:
            self.frozen_at_start = gc.get_freeze_count()
            self.started.set()
            await until_cancelled()

    gc.unfreeze()
    witness = FreezeWitness()
    mgr = manager(freeze_heap_after_sync=freeze)
    mgr.add(witness)
    stopping = asyncio.Event()
    run = asyncio.create_task(mgr.start(stopping))
    try:
        await asyncio.wait_for(witness.started.wait(), 5)
        assert (witness.frozen_at_start > 0) is freeze
    finally:
        stopping.set()
        await asyncio.wait_for(run, 5)
        gc.unfreeze()


def test_leader_election_needs_an_id() -> None:
    with pytest.raises(ValueError, match="leader_election_id"):
        manager(leader_election=True)


async def test_the_leader_client_refuses_writes_while_not_leading_and_passes_reads() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}
    configmaps = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
    electing = manager(leader_election=True, leader_election_id="lock", leader_election_namespace="ns")
    not_electing = manager()
    try:
        with pytest.raises(LeadershipLostError):
            await electing.leader_client.create(configmaps, cm)  # refused before anything is sent
        with pytest.raises(ApiConnectionError):
            await electing.leader_client.get(configmaps, "a", "ns")  # sent (to a closed port)
        with pytest.raises(ApiConnectionError):
            await not_electing.leader_client.create(configmaps, cm)  # without leader election every write is sent
    finally:
        await electing.client.close()
        await not_electing.client.close()


@pytest.mark.signals
async def test_sigint_stops_the_manager_even_when_inherited_ignored_and_stays_ignored_afterwards() -> None:
    journal: list[str] = []
    mgr = manager()
    controller = Tracked("controller", journal, leader=True)
    mgr.add(controller)
    sigterm = signal.getsignal(signal.SIGTERM)
    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job of a non-interactive shell
    try:
        run = asyncio.create_task(mgr.start())
        await asyncio.wait_for(controller.started.wait(), 5)
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.wait_for(run, 5)
        assert journal == ["start controller", "stop controller"]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is sigterm
    finally:
        signal.signal(signal.SIGINT, inherited)
