"""Field errors rendered exactly as Kubernetes apimachinery renders them, and their aggregate text.

The texts are part of llmaz's contract: the API server shows a denial as
`admission webhook "<name>" denied the request: <aggregate>`, and users and tests match on it.

- Forbidden:  `<path>: Forbidden: <detail>`
- Required:   `<path>: Required value: <detail>`
- Invalid:    `<path>: Invalid value: <value>: <detail>`, the value quoted like Go's `%q` when it is a string,
  bare when it is a number or a boolean, `null` when absent, a list of strings as Go's `%#v` writes it
  (`[]string{"a", "b"}`), anything else as compact JSON.
- Aggregate:  one distinct message renders as itself, several as `[e1, e2, ...]`; repeated messages are
  shown once, in first-seen order.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


class ErrorType(enum.Enum):
    FORBIDDEN = "Forbidden"
    REQUIRED = "Required value"
    INVALID = "Invalid value"


@dataclass(frozen=True, slots=True)
class FieldError:
    type: ErrorType
    path: str
    detail: str
    value: Any = None

    def __str__(self) -> str:
        body = self.type.value
        if self.type is ErrorType.INVALID:
            body += f": {format_value(self.value)}"
        return f"{self.path}: {body}: {self.detail}" if self.detail else f"{self.path}: {body}"


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(ErrorType.FORBIDDEN, path, detail)


def required(path: str, detail: str) -> FieldError:
    return FieldError(ErrorType.REQUIRED, path, detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(ErrorType.INVALID, path, detail, value)


def aggregate(errors: Iterable[FieldError]) -> str:
    """The aggregate text of `errors` ("" when there are none)."""
    messages = list(dict.fromkeys(str(error) for error in errors))
    if len(messages) == 1:
        return messages[0]
    return f"[{', '.join(messages)}]" if messages else ""


def format_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "[]string{" + ", ".join(go_quote(item) for item in value) + "}"
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


_ESCAPES = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t", "\v": r"\v"}


def go_quote(text: str) -> str:
    """A double-quoted literal as Go's `strconv.Quote` writes it (printable characters kept as they are)."""
    out = ['"']
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char.isprintable() or char == " ":
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)
