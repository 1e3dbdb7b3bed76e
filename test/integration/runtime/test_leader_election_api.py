"""Two managers contending for one Lease: exactly one runs leader-only work, never both at once, and the
other takes over when the leader stops (at once when it releases) or the leader steps down when it loses: to an
intruder, to an API server that throttles or stalls its renewals (through a loopback proxy), or to a pause of
its whole event loop past the lease."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from llmaz.runtime.client import Client
from llmaz.runtime.leaderelection import JITTER_FACTOR, LEASES
from llmaz.runtime.manager import LeadershipLostError, Manager, ManagerOptions
from llmaz.runtime.resource import Resource
from llmaz.runtime.runnable import Runnable, until_cancelled
from llmaz_dev.envtest.control_plane import ControlPlane
from llmaz_dev.testing.manifests import CONFIGMAPS, configmap
from llmaz_dev.testing.waiting import eventually

from .apiproxy import ApiProxy, is_lease

pytestmark = pytest.mark.integration

LEASE, RENEW, RETRY = 2.0, 1.5, 0.4
MAX_RETRY_WAIT = RETRY * (1 + JITTER_FACTOR)
SLACK = 1.0  # API round trips and shutdown of the old leader


class Board:
    """Instruments leader-only work across managers (and threads): who runs, when, and whether two ever overlap."""

    def __init__(self) -> None:
        self.active: set[str] = set()
        self.starts: list[tuple[str, float]] = []
        self.stops: list[tuple[str, float]] = []
        self.overlaps = 0

    def enter(self, who: str) -> None:
        if self.active:
            self.overlaps += 1
        self.active.add(who)
        self.starts.append((who, time.monotonic()))

    def leave(self, who: str) -> None:
        self.active.discard(who)
        self.stops.append((who, time.monotonic()))


class LeaderOnlyWork:
    needs_leader_election = True

    def __init__(self, who: str, board: Board) -> None:
        self.who = who
        self.board = board

    async def run(self) -> None:
        self.board.enter(self.who)
        try:
            await until_cancelled()
        finally:
            self.board.leave(self.who)


@pytest_asyncio.fixture
async def clients(kubeconfig: Path) -> AsyncIterator[list[Client]]:
    made = [await Client.from_kubeconfig(kubeconfig) for _ in range(2)]
    yield made
    for c in made:
        await c.close()


def contender(
    client: Client, who: str, namespace: str, board: Board, release: bool, work: Runnable | None = None
) -> Manager:
    options = ManagerOptions(
        health_probe_bind_address=None,
        leader_election=True,
        leader_election_id="runtime-test-lock",
        leader_election_namespace=namespace,
        lease_duration=LEASE,
        renew_deadline=RENEW,
        retry_period=RETRY,
        leader_election_release_on_cancel=release,
        identity=who,
        graceful_shutdown_timeout=5,
    )
    mgr = Manager(client, options)
    mgr.add(work or LeaderOnlyWork(who, board))
    return mgr


def lease_reads(client: Client) -> list[float]:
    """When `client` got a Lease back, from now on (an elector reads the Lease on each attempt to acquire it)."""
    reads: list[float] = []
    get = client.get

    async def get_recording_leases(resource: Resource, *args: Any, **kwargs: Any) -> dict[str, Any]:
        found = await get(resource, *args, **kwargs)
        if resource == LEASES:
            reads.append(time.monotonic())
        return found

    client.get = get_recording_leases  # type: ignore[method-assign]
    return reads


async def handover_seconds(clients: list[Client], namespace: str, release: bool) -> tuple[float, Board, str]:
    board = Board()
    stops = {who: asyncio.Event() for who in ("one", "two")}
    reads = {who: lease_reads(c) for who, c in zip(stops, clients, strict=True)}
    runs = {
        who: asyncio.create_task(contender(c, who, namespace, board, release).start(stops[who]))
        for who, c in zip(stops, clients, strict=True)
    }
    await eventually(lambda: len(board.active) == 1, within=20, what="a first leader")
    first, led_from = board.starts[0]
    second = "two" if first == "one" else "one"
    # The follower keeps retrying and must not start: wait until it has read the Lease two lease durations in.
    await eventually(lambda: reads[second] and reads[second][-1] > led_from + LEASE * 2, within=20,
                     what="the follower to read the Lease two lease durations after the leader took it")  # fmt: skip
    assert len(board.starts) == 1
    stopped_at = time.monotonic()
    stops[first].set()
    await asyncio.wait_for(runs[first], 10)
    await eventually(lambda: second in board.active, within=20, what="the follower to take over")
    took_over = dict(board.starts)[second] - stopped_at
    lease = await clients[1].get(LEASES, "runtime-test-lock", namespace)
    assert lease["spec"]["holderIdentity"] == second
    stops[second].set()
    await asyncio.wait_for(runs[second], 10)
    assert board.overlaps == 0
    return took_over, board, second


async def test_one_leader_runs_and_a_stopped_leader_is_replaced_within_the_lease(
    clients: list[Client], namespace: str
) -> None:
    took_over, board, _ = await handover_seconds(clients, namespace, release=False)
    # The follower must see the record unchanged for a full lease, counted from when it first saw the last
    # renewal (up to one jittered retry after it), and notices expiry on its next jittered retry.
    assert LEASE - RETRY - SLACK / 2 <= took_over <= LEASE + 2 * MAX_RETRY_WAIT + SLACK
    assert len(board.starts) == 2


async def test_a_leader_that_releases_on_stop_is_replaced_on_the_next_retry(
    clients: list[Client], namespace: str
) -> None:
    took_over, _, _ = await handover_seconds(clients, namespace, release=True)
    assert took_over <= MAX_RETRY_WAIT + SLACK


async def test_a_leader_that_cannot_renew_stops_its_work_and_fails(
    client: Client, namespace: str, control_plane: ControlPlane
) -> None:
    board = Board()
    mgr = contender(client, "one", namespace, board, release=False)
    run = asyncio.create_task(mgr.start(asyncio.Event()))
    await eventually(lambda: "one" in board.active, within=20, what="leadership")
    # Another identity takes the Lease by force; every renew from now on sees a foreign holder.
    lease = await client.get(LEASES, "runtime-test-lock", namespace)
    lease["spec"]["holderIdentity"] = "intruder"
    await client.update(LEASES, lease)
    began = time.monotonic()
    with pytest.raises(LeadershipLostError):
        await asyncio.wait_for(run, 20)
    assert board.active == set()
    # Its work stops on its next renewal, when it reads the Lease, not after waiting out its renew deadline.
    assert dict(board.stops)["one"] - began <= RETRY + SLACK / 2


def renewed_by_proxy(proxy: ApiProxy) -> float:
    """When the proxy last answered a successful Lease write (the leader's last renewal)."""
    writes = proxy.answered(lambda e: "/leases" in e.path and e.method in ("PUT", "POST") and e.status < 300)
    return writes[-1].at


@pytest.mark.parametrize("trouble", ["throttling", "slow"])
async def test_a_leader_that_cannot_reach_the_api_server_stops_at_its_renew_deadline_before_anyone_takes_over(
    clients: list[Client], kubeconfig: Path, namespace: str, trouble: str
) -> None:
    proxy = await ApiProxy.start(kubeconfig)
    behind_proxy = Client(proxy.rest_config())
    board = Board()
    stops = {who: asyncio.Event() for who in ("one", "two")}
    one = asyncio.create_task(contender(behind_proxy, "one", namespace, board, False).start(stops["one"]))
    try:
        await eventually(lambda: board.active == {"one"}, within=20, what="the first leader")
        two = asyncio.create_task(contender(clients[1], "two", namespace, board, False).start(stops["two"]))
        # From now on every Lease request of the leader is throttled (429, Retry-After 1 s, which the transport
        # retries), or answered after 3 s (past each request's timeout).
        if trouble == "throttling":
            proxy.throttle = is_lease
        else:
            proxy.delay = lambda request: 3.0 if is_lease(request) else 0.0
        with pytest.raises(LeadershipLostError):
            await asyncio.wait_for(one, 30)
        await eventually(lambda: "two" in board.active, within=20, what="the follower to take over")
        stopped = dict(board.stops)["one"] - renewed_by_proxy(proxy)
        assert stopped <= RENEW + SLACK / 2, f"leader-only work ran {stopped:.1f} s past the last renewal"
        assert board.overlaps == 0
        assert dict(board.starts)["two"] > dict(board.stops)["one"]
        stops["two"].set()
        await asyncio.wait_for(two, 10)
    finally:
        stops["one"].set()
        if not one.done():
            one.cancel()
        await behind_proxy.close()
        await proxy.stop()


class Writer:
    """Leader-only work that writes through the manager's `leader_client` every 50 ms, recording when each write
    that succeeded was sent."""

    needs_leader_election = True

    def __init__(self, who: str, namespace: str, board: Board) -> None:
        self.who = who
        self.namespace = namespace
        self.board = board
        self.manager: Manager | None = None
        self.sent: list[float] = []

    async def run(self) -> None:
        assert self.manager is not None
        self.board.enter(self.who)
        try:
            while True:
                sent = time.monotonic()
                patch = {"data": {self.who: str(sent)}}
                await self.manager.leader_client.patch(CONFIGMAPS, "written", patch, self.namespace)
                self.sent.append(sent)
                await asyncio.sleep(0.05)  # pacing, not synchronisation
        finally:
            self.board.leave(self.who)


def writing_contender(client: Client, who: str, namespace: str, board: Board) -> tuple[Manager, Writer]:
    writer = Writer(who, namespace, board)
    mgr = contender(client, who, namespace, board, release=False, work=writer)
    writer.manager = mgr
    return mgr, writer


class InThread:
    """A manager on its own event loop in its own thread, so that the test can block that loop alone (a process
    stopped by SIGSTOP) while the rest keeps running."""

    def __init__(self, kubeconfig: Path, who: str, namespace: str, board: Board) -> None:
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: asyncio.Event | None = None
        self.manager: Manager | None = None
        self.writer: Writer | None = None
        self.error: BaseException | None = None
        self._args = (kubeconfig, who, namespace, board)
        self.thread = threading.Thread(target=self._main, name=f"manager-{who}", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as err:  # reported to the test through `error`
            self.error = err

    async def _run(self) -> None:
        kubeconfig, who, namespace, board = self._args
        async with await Client.from_kubeconfig(kubeconfig) as client:
            self.loop = asyncio.get_running_loop()
            self.stopping = asyncio.Event()
            self.manager, self.writer = writing_contender(client, who, namespace, board)
            self.ready.set()
            await self.manager.start(self.stopping)

    def pause(self, seconds: float) -> None:
        """Block the manager's event loop for `seconds`: nothing of it runs, as under SIGSTOP."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(time.sleep, seconds)

    def stop(self) -> None:
        if self.loop is not None and self.stopping is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(timeout=15)


async def test_a_leader_paused_past_its_lease_wakes_up_deposed_and_writes_nothing_beside_its_successor(
    clients: list[Client], kubeconfig: Path, namespace: str
) -> None:
    await clients[0].create(CONFIGMAPS, configmap("written", namespace))
    board = Board()
    paused = InThread(kubeconfig, "one", namespace, board)
    paused.thread.start()
    two_stopping = asyncio.Event()
    two: asyncio.Task[None] | None = None
    both_leading = 0
    try:
        await asyncio.to_thread(paused.ready.wait, 20)
        await eventually(lambda: board.active == {"one"}, within=20, what="the first leader")
        mgr_two, _ = writing_contender(clients[1], "two", namespace, board)
        two = asyncio.create_task(mgr_two.start(two_stopping))
        assert paused.writer is not None
        paused_at = time.monotonic()
        paused.pause(LEASE * 2 + 1)
        await eventually(lambda: "two" in board.active, within=20, what="the follower to take over")
        taken_over = dict(board.starts)["two"]

        def one_done() -> bool:
            nonlocal both_leading
            if paused.manager is not None and paused.manager.is_leader and mgr_two.is_leader:
                both_leading += 1
            return not paused.thread.is_alive()

        await eventually(one_done, within=20, interval=0.01, what="the paused leader to exit")
        assert isinstance(paused.error, LeadershipLostError)
        assert both_leading == 0, "both managers reported leading"
        assert [sent for sent in paused.writer.sent if sent < paused_at], "the first leader never wrote"
        late = [round(sent - taken_over, 2) for sent in paused.writer.sent if sent >= paused_at]
        assert late == [], f"the paused leader wrote {len(late)} times after waking up (s after takeover: {late})"
        # The board's overlap count says nothing here: a frozen replica cannot even run its work's cleanup. What
        # matters is that it neither claimed to lead nor wrote once its renew deadline had passed.
    finally:
        paused.stop()
        two_stopping.set()
        if two is not None:
            await asyncio.wait_for(two, 10)
