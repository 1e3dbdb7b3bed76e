"""Rendering of recommended-config arguments: llmaz placeholders `{{ .Name }}` and nothing else.

Invariants:
- Only text matching `\\{\\{\\s*\\.(\\w+)\\s*\\}\\}` is template syntax. Everything else (`{{ ModelPath }}` without
  the dot, `{%`, `{#`, `}}`, shell such as `${#var}`, any line endings) is copied byte for byte: user text is never
  template source, it reaches the output as a literal value.
- A placeholder whose name is unknown, or whose value is empty, fails with llmaz's text
  `missing flag or the flag has format error: <original arg>` (`ArgRenderError`).
- Templates are compiled once per distinct argument string and evaluated in jinja2's sandbox with `StrictUndefined`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from llmaz.controllers.builders.errors import ArgRenderError

PLACEHOLDER = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")


class _PlaceholderEnvironment(SandboxedEnvironment):
    """Subscripts look up items only: `values['items']` must be undefined, not the dict's method."""

    def getitem(self, obj: Any, argument: Any) -> Any:
        try:
            return obj[argument]
        except (KeyError, IndexError, TypeError):
            return self.undefined(obj=obj, name=argument)


_ENVIRONMENT = _PlaceholderEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)


@functools.lru_cache(maxsize=1024)
def _compile(arg: str) -> tuple[jinja2.Template, tuple[str, ...]] | None:
    """A template alternating literal pieces (passed as values) and variable lookups; None without placeholders."""
    pieces = PLACEHOLDER.split(arg)  # literal, name, literal, name, ..., literal
    if len(pieces) == 1:
        return None
    literals = tuple(pieces[0::2])
    source = []
    for index, name in enumerate(pieces[1::2]):
        source.append(f"{{{{ literals[{index}] }}}}{{{{ values[{name!r}] }}}}")
    source.append(f"{{{{ literals[{len(literals) - 1}] }}}}")
    return _ENVIRONMENT.from_string("".join(source)), literals


def render_arg(arg: str, values: Mapping[str, str]) -> str:
    """`arg` with every llmaz placeholder replaced by its value in `values`."""
    compiled = _compile(arg)
    if compiled is None:
        return arg
    template, literals = compiled
    defined = {name: value for name, value in values.items() if value}
    try:
        return template.render(literals=literals, values=defined)
    except jinja2.TemplateError as error:
        raise ArgRenderError(arg) from error


def render_args(args: Sequence[str] | None, values: Mapping[str, str]) -> list[str]:
    """Every argument rendered, in order (an empty list when there are none)."""
    return [render_arg(arg, values) for arg in args or ()]
