"""Two managers contending for one Lease: exactly one runs leader-only work, never both at once, and the
other takes over when the leader stops (at once when it releases) or the leader steps down when it loses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from llmaz.envtest.control_plane import ControlPlane
from llmaz.runtime.client import Client
from llmaz.runtime.leaderelection import JITTER_FACTOR, LEASES
from llmaz.runtime.manager import LeadershipLostError, Manager, ManagerOptions
from llmaz.testing.waiting import eventually

pytestmark = pytest.mark.integration

LEASE, RENEW, RETRY = 2.0, 1.5, 0.4
MAX_RETRY_WAIT = RETRY * (1 + JITTER_FACTOR)
SLACK = 1.0  # API round trips and shutdown of the old leader


class Board:
    """Instruments leader-only work across managers: who runs, when, and whether two ever overlap."""

    def __init__(self) -> None:
        self.active: set[str] = set()
        self.starts: list[tuple[str, float]] = []
        self.overlaps = 0

    def enter(self, who: str) -> None:
        if self.active:
            self.overlaps += 1
        self.active.add(who)
        self.starts.append((who, time.monotonic()))

    def leave(self, who: str) -> None:
        self.active.discard(who)


class LeaderOnlyWork:
    needs_leader_election = True

    def __init__(self, who: str, board: Board) -> None:
        self.who = who
        self.board = board

    async def run(self, stopping: asyncio.Event) -> None:
        self.board.enter(self.who)
        try:
            await stopping.wait()
        finally:
            self.board.leave(self.who)


@pytest_asyncio.fixture
async def clients(kubeconfig: Path) -> AsyncIterator[list[Client]]:
    made = [await Client.from_kubeconfig(kubeconfig) for _ in range(2)]
    yield made
    for c in made:
        await c.close()


def contender(client: Client, who: str, namespace: str, board: Board, release: bool) -> Manager:
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
    mgr.add(LeaderOnlyWork(who, board))
    return mgr


async def handover_seconds(clients: list[Client], namespace: str, release: bool) -> tuple[float, Board, str]:
    board = Board()
    stops = {who: asyncio.Event() for who in ("one", "two")}
    runs = {
        who: asyncio.create_task(contender(c, who, namespace, board, release).start(stops[who]))
        for who, c in zip(stops, clients, strict=True)
    }
    await eventually(lambda: len(board.active) == 1, within=20, what="a first leader")
    await asyncio.sleep(LEASE * 2)  # the follower keeps retrying and must not start
    assert len(board.starts) == 1
    first = board.starts[0][0]
    second = "two" if first == "one" else "one"
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
    assert time.monotonic() - began <= RENEW + RETRY + SLACK
    assert board.active == set()
