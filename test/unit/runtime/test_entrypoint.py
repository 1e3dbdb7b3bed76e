"""How a process starts and ends: its flags, its manager run over a client it closes, and its exit status (0 when
its main coroutine returns, 1 with its failure logged otherwise)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest

from llmaz.runtime.client import Client, RestConfig
from llmaz.runtime.client.credentials import ConfigError
from llmaz.runtime.entrypoint import StartRefusedError, add_process_flags, exit_status, run_manager
from llmaz.runtime.manager import Manager, ManagerOptions


class Recorder:
    def __init__(self) -> None:
        self.errors: list[tuple[str, dict[str, Any]]] = []

    def error(self, event: str, **fields: Any) -> None:
        self.errors.append((event, fields))


async def returns() -> None:
    return None


async def fails_with(error: Exception) -> None:
    raise error


def test_a_main_that_returns_exits_0_and_logs_nothing() -> None:
    logger = Recorder()
    assert exit_status(returns(), logger, "gateway") == 0
    assert logger.errors == []


@pytest.mark.parametrize(
    ("error", "event", "traceback"),
    [
        (ConfigError("no kubeconfig: set KUBECONFIG"), "cannot load the API server configuration", False),
        (RuntimeError("informer failed"), "manager exited", True),
        (StartRefusedError("another llmaz manager is running: ..."), "manager refused to start", False),
    ],
)
def test_a_main_that_fails_exits_1_with_one_error_line(error: Exception, event: str, traceback: bool) -> None:
    logger = Recorder()
    assert exit_status(fails_with(error), logger, "manager") == 1
    ((logged, fields),) = logger.errors
    assert logged == event
    assert fields["error"] == str(error)
    assert fields.get("exc_info", False) is traceback


class FailsAtOnce:
    needs_leader_election = False

    async def run(self, stopping: asyncio.Event) -> None:
        raise RuntimeError("runnable failed")


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[Client]:
    """The clients closed during the test, in order."""
    closed: list[Client] = []
    original_close = Client.close

    async def close(client: Client) -> None:
        closed.append(client)
        await original_close(client)

    monkeypatch.setattr(Client, "close", close)
    return closed


@pytest.mark.signals  # the manager's SIGTERM/SIGINT handlers are in place while it runs
async def test_run_manager_runs_what_setup_adds_and_closes_the_client_however_it_ends(closed: list[Client]) -> None:
    managers: list[Manager] = []

    def setup(manager: Manager) -> None:
        managers.append(manager)
        manager.add(FailsAtOnce())

    options = ManagerOptions(health_probe_bind_address="127.0.0.1:0", graceful_shutdown_timeout=5)
    with pytest.raises(RuntimeError, match="runnable failed"):
        await asyncio.wait_for(run_manager(RestConfig(host="https://127.0.0.1:1"), options, setup), 30)
    (manager,) = managers
    assert closed == [manager.client]


async def test_a_refusing_preflight_ends_run_manager_before_any_manager_exists_and_closes_its_client(
    closed: list[Client],
) -> None:
    checked: list[Client] = []
    managers: list[Manager] = []

    async def preflight(client: Client) -> None:
        checked.append(client)
        raise StartRefusedError("not now")

    options = ManagerOptions(health_probe_bind_address="127.0.0.1:0")
    with pytest.raises(StartRefusedError, match="not now"):
        await run_manager(RestConfig(host="https://127.0.0.1:1"), options, managers.append, preflight=preflight)
    assert managers == []
    (client,) = checked
    assert closed == [client]


def test_every_process_takes_the_same_client_and_log_flags() -> None:
    parser = argparse.ArgumentParser()
    add_process_flags(parser)
    args = parser.parse_args(["--kubeconfig", "/k", "--log-level", "debug", "--log-format", "json"])
    assert (args.kubeconfig, args.log_level, args.log_format) == ("/k", "debug", "json")
    assert vars(parser.parse_args([])) == {"kubeconfig": None, "log_level": "info", "log_format": "auto"}
