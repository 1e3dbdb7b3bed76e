"""Structured logs for the loader: one JSON object per line on stderr, library warnings included.

Events are constant names (`download.progress`, `download.complete`, ...) and every variable goes in a field, so
`kubectl logs -c model-loader` can be filtered with jq. The storage libraries log through the standard `logging`
module; their WARNING and above are rendered as the same JSON lines.
"""

from __future__ import annotations

import logging
import sys

import structlog

_SHARED: list[structlog.typing.Processor] = [
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def configure(level: int = logging.INFO) -> None:
    """Route structlog and stdlib logging to JSON lines on stderr (idempotent)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=_SHARED,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("llmaz.loader").setLevel(level)
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "llmaz.loader") -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
