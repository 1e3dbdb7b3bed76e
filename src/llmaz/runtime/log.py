"""Structured logging: JSON in the cluster, readable on a terminal, context bound per reconcile/request.

Messages are constant event names; variable data goes into fields. Context such as controller, kind, namespace,
name and reconcile_id is bound with `bound_context` (contextvars), so every line logged inside carries it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog


class _Stderr:
    """Whatever `sys.stderr` is when a line is written. Loggers are cached on first use, so a logger given the
    stream itself would keep writing to the one of that moment after it is replaced (and closed), as a test
    runner's capture does between tests."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "info", fmt: str = "auto") -> None:
    """Configure structlog once per process. `fmt` is "json", "console", or "auto" (console on a TTY)."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: Any = structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)


@contextmanager
def bound_context(**fields: Any) -> Iterator[None]:
    """Bind fields to every log line emitted inside the block (task-local through contextvars)."""
    with structlog.contextvars.bound_contextvars(**fields):
        yield


MAX_FIELD_CHARS = 256


def bounded(value: object, limit: int = MAX_FIELD_CHARS) -> str:
    """`value` as text of at most `limit` characters plus a marker saying how much was cut.

    For anything a client controls (uids, names, users, headers): logged verbatim, one request could write
    megabytes into the log.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more characters]"
