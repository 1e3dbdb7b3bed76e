"""`llmaz-loader`: the model-loader init container's entry point; the exit code tells failures apart.

0 loaded (or already complete), 1 unexpected error, 2 bad configuration, 3 not found, 4 unauthorized,
5 transient failure after retries, 6 local storage failure. See docs/model-loader.md.

A loader of an adapter (`ADAPTER_NAME` set) says so in its start and failure log lines, and its termination message
starts with `adapter <name>: `, so the condition reporting the failure names the adapter.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import llmaz.apis.constants as c
from llmaz.loader import log
from llmaz.loader.config import read_config
from llmaz.loader.errors import ExitCode, LoaderError
from llmaz.loader.load import load

TERMINATION_LOG = "/dev/termination-log"


def run(env: Mapping[str, str]) -> int:
    """Load the model `env` describes; returns the process exit code and never raises."""
    logger = log.get_logger()
    adapter = env.get(c.ENV_ADAPTER_NAME, "").strip()
    subject = f"adapter {adapter}: " if adapter else ""
    if adapter:
        logger = logger.bind(adapter=adapter)
    try:
        config = read_config(env)
        logger.info(
            "load.start",
            source=config.source.describe(),
            target=str(config.target.model_path),
            single_file=config.target.single_file,
        )
        load(config, env)
    except LoaderError as error:
        logger.error("load.failed", reason=error.reason, exit_code=int(error.exit_code), message=error.message)
        _termination_message(env, f"{subject}{error.reason}: {error.message}")
        return int(error.exit_code)
    except Exception as error:
        logger.exception("load.failed", reason="Unexpected", exit_code=int(ExitCode.UNEXPECTED))
        _termination_message(env, f"{subject}Unexpected: {type(error).__name__}: {error}")
        return int(ExitCode.UNEXPECTED)
    return int(ExitCode.OK)


def _termination_message(env: Mapping[str, str], message: str) -> None:
    """Kubernetes shows this file's content as the container's termination message (`kubectl describe pod`)."""
    path = Path(env.get("LOADER_TERMINATION_LOG", TERMINATION_LOG))
    if path.exists():
        with contextlib.suppress(OSError):
            path.write_text(message[:4000])


def main() -> None:
    # huggingface_hub reads this at import; without it every run first fetches a telemetry registry from the Hub.
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    log.configure()
    sys.exit(run(os.environ))


if __name__ == "__main__":
    main()
