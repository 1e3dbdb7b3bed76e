"""How a process built on the runtime ends: its main coroutine run to completion, and an exit status."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from llmaz.runtime.client.credentials import ConfigError


def exit_status(main: Coroutine[Any, Any, None], logger: Any, process: str) -> int:
    """Run `main`; 0 when it returns, else 1 with the failure logged: one line when the API server configuration
    cannot load (the message says what to fix), the traceback for anything else."""
    try:
        asyncio.run(main)
    except ConfigError as err:
        logger.error("cannot load the API server configuration", error=str(err))
        return 1
    except Exception as err:
        logger.error(f"{process} exited", error=str(err), exc_info=True)
        return 1
    return 0
