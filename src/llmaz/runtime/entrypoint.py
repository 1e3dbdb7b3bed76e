"""How a process built on the runtime starts and ends, the same for llmaz-manager and llmaz-gateway.

- `add_process_flags`: the flags every such process takes (`--kubeconfig`, `--log-level`, `--log-format`).
- `start_logging`: logging as those flags say, and the process's logger.
- `run_manager`: a client, a Manager with what `setup` adds to it, run until SIGTERM or SIGINT (the Manager's
  signal handling and stop order), the client closed however it ends; a `preflight` check over the client first.
- `exit_status`: the process's main coroutine run to completion, and its exit status.
- `StartRefusedError`: what a preflight check raises to end the process with one line saying why.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from llmaz.runtime import log
from llmaz.runtime.client import Client
from llmaz.runtime.client.config import RestConfig
from llmaz.runtime.client.credentials import ConfigError
from llmaz.runtime.manager import Manager, ManagerOptions


def add_process_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--kubeconfig", default=None, help="kubeconfig path (default: in-cluster or $KUBECONFIG)")
    add("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add("--log-format", default="auto", choices=["auto", "json", "console"])


def start_logging(args: argparse.Namespace, logger: str) -> Any:
    """Configure logging from `add_process_flags`' flags; the logger called `logger`."""
    log.configure(args.log_level, args.log_format)
    return log.get_logger(logger)


class StartRefusedError(Exception):
    """The process must not start; the message says why and what to do."""


async def run_manager(
    config: RestConfig,
    options: ManagerOptions,
    setup: Callable[[Manager], None],
    preflight: Callable[[Client], Awaitable[None]] | None = None,
) -> None:
    """Run a Manager over a client of `config`, after `setup(manager)` has added its runnables and checks, and
    after `preflight(client)`, when given, has returned: it runs before anything starts or serves."""
    client = Client(config)
    try:
        if preflight is not None:
            await preflight(client)
        manager = Manager(client, options)
        setup(manager)
        await manager.start()
    finally:
        await client.close()


def exit_status(main: Coroutine[Any, Any, None], logger: Any, process: str) -> int:
    """Run `main`; 0 when it returns, else 1 with the failure logged: one line when the API server configuration
    cannot load or a preflight check refuses the start (the message says what to do), the traceback for anything
    else."""
    try:
        asyncio.run(main)
    except ConfigError as err:
        logger.error("cannot load the API server configuration", error=str(err))
        return 1
    except StartRefusedError as err:
        logger.error(f"{process} refused to start", error=str(err))
        return 1
    except Exception as err:
        logger.error(f"{process} exited", error=str(err), exc_info=True)
        return 1
    return 0
