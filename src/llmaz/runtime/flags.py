"""Flag value types shared by the processes built on the runtime (llmaz-manager, llmaz-gateway).

Each is an argparse `type`: it returns the parsed value or raises `argparse.ArgumentTypeError` with what was wrong,
so a bad flag ends the process at start-up with argparse's usage line and the reason, never later.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

from llmaz.runtime.server.address import split_host_port

T = TypeVar("T")


def parsed_by(parse: Callable[[str], T]) -> Callable[[str], T]:
    """A flag type from a parser that raises ValueError with its own message (a duration, a weight)."""

    def flag_type(text: str) -> T:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    flag_type.__name__ = getattr(parse, "__name__", "value")
    return flag_type


def bind_address(text: str) -> str:
    """A `host:port` flag value (IPv6 hosts in brackets: `[::]:8443`), checked; `0` passes (it disables)."""
    if text != "0":
        try:
            split_host_port(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from err
    return text


def _number(text: str, kind: Callable[[str], T]) -> T:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def positive_seconds(text: str) -> float:
    value = _number(text, float)
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def non_negative_seconds(text: str) -> float:
    value = _number(text, float)
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, got {text}")
    return value


def at_least_one(text: str) -> float:
    value = _number(text, float)
    if not (value >= 1 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number of at least 1, got {text}")
    return value


def port(text: str) -> int:
    value = _number(text, int)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port (0-65535), got {text}")
    return value


def address_pair(text: str) -> tuple[str, str]:
    """`ADDRESS=TARGET`."""
    address, sep, target = text.partition("=")
    if not sep or not address or not target:
        raise argparse.ArgumentTypeError(f"expected ADDRESS=TARGET, got {text!r}")
    return address, target


def namespaced_name(text: str) -> str:
    """`NAMESPACE/NAME`, kept as text."""
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return text
