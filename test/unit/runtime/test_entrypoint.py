"""A process's exit status: 0 when its main coroutine returns, 1 with its failure logged otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.runtime.client.credentials import ConfigError
from llmaz.runtime.entrypoint import exit_status


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
    ],
)
def test_a_main_that_fails_exits_1_with_one_error_line(error: Exception, event: str, traceback: bool) -> None:
    logger = Recorder()
    assert exit_status(fails_with(error), logger, "manager") == 1
    ((logged, fields),) = logger.errors
    assert logged == event
    assert fields["error"] == str(error)
    assert fields.get("exc_info", False) is traceback
