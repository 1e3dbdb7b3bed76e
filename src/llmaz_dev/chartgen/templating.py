"""Built objects turned into Helm template text.

A field that becomes configurable is replaced by a token (a plain word YAML never quotes), the objects are dumped
as YAML, literal `{{` in them (BackendRuntime argument placeholders such as `{{ .ModelPath }}`) is escaped so Helm
prints it unchanged, and each token is then replaced by template text:

- `inline(expr)`: `key: TOKEN` becomes `key: {{ expr }}`;
- `block(expr)`: `key: TOKEN` becomes `key:` followed by `{{- toYaml (expr) | nindent N }}`, N two more than the
  key's indentation (lists, maps);
- `lines(text)`: a map entry `TOKEN: ''` (added by the caller as the last key of a map) is replaced by
  `{{- text | nindent N }}`, N the entry's indentation: more entries of that map, such as the chart's labels;
- `entries(expr)`: the same, for a map `expr`, rendered only when it is not empty (values such as podLabels);
- `entry(key, expr)`: a map entry `TOKEN: ''` becomes `key:` with the value of `expr`, only when that is not
  empty (an optional field: nodeSelector, tolerations, ...), so that empty defaults render nothing;
- `items(expr)`: a list item `- TOKEN` becomes the items of the list `expr` (none when it is empty);
- `when(condition, items)`: a list item `- TOKEN` becomes `items`, dumped, only when `condition` holds;
- `each(expr, var, item)`: a list item `- TOKEN` becomes one `item` per element `var` of the list `expr`.

`render` replaces each token once; a token it does not find is an error. What a replacement writes is read again,
so the items of `when` and `each` may hold tokens of their own.

The YAML is dumped with keys in the order kustomize wrote them, without line folding, multi-line strings as
literal blocks.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from typing import Any

import yaml

_LINE = re.compile(r"^(?P<indent>\s*(?:- )*)(?P<rest>.*)$")
ESCAPED_OPEN = '{{ "{{" }}'


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(document: Any) -> str:
    """One YAML document, as the chart writes it (also used for values.yaml)."""
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=100_000, allow_unicode=True)


class Template:
    """Tokens handed out for one template file, and what each becomes."""

    def __init__(self) -> None:
        self._replacements: dict[str, Callable[[str, str, int], str]] = {}
        self._counter = itertools.count()

    def inline(self, expr: str) -> str:
        return self._token(lambda line, token, _indent: line.replace(token, f"{{{{ {expr} }}}}"))

    def block(self, expr: str) -> str:
        def replace(line: str, token: str, indent: int) -> str:
            head = line[: line.index(token)].rstrip()
            return f"{head}{{{{- toYaml ({expr}) | nindent {indent + 2} }}}}"

        return self._token(replace)

    def lines(self, text: str) -> str:
        return self._token(lambda _line, _token, indent: " " * indent + f"{{{{- {text} | nindent {indent} }}}}")

    def entries(self, expr: str) -> str:
        return self._token(
            lambda _line, _token, indent: (
                f"{' ' * indent}{{{{- with ({expr}) }}}}{{{{- toYaml . | nindent {indent} }}}}{{{{- end }}}}"
            )
        )

    def entry(self, key: str, expr: str, *, scalar: bool = False) -> str:
        def replace(line: str, token: str, indent: int) -> str:
            pad = " " * indent
            value = " {{ . | quote }}" if scalar else f"{{{{- toYaml . | nindent {indent + 2} }}}}"
            return f"{line[: line.index(token)]}{{{{- with ({expr}) }}}}\n{pad}{key}:{value}\n{pad}{{{{- end }}}}"

        return self._token(replace)

    def items(self, expr: str) -> str:
        return self._token(
            lambda line, _token, _indent: (
                f"{' ' * _dash(line)}{{{{- with ({expr}) }}}}{{{{- toYaml . | nindent {_dash(line)} }}}}{{{{- end }}}}"
            )
        )

    def when(self, condition: str, items: list[Any]) -> str:
        return self._token(lambda line, _t, _i: _around(line, f"{{{{- if {condition} }}}}", items))

    def each(self, expr: str, var: str, item: Any) -> str:
        return self._token(lambda line, _t, _i: _around(line, f"{{{{- range {var} := ({expr}) }}}}", [item]))

    def render(self, documents: Iterable[Any]) -> str:
        text = "---\n".join(dump(document) for document in documents).replace("{{", ESCAPED_OPEN)
        out = []
        pending = text.splitlines()[::-1]
        while pending:
            line = pending.pop()
            token = next((t for t in self._replacements if t in line), None)
            if token is None:
                out.append(line)
                continue
            match = _LINE.match(line)
            assert match is not None
            replaced = self._replacements.pop(token)(line, token, len(match.group("indent")))
            pending += replaced.splitlines()[::-1]
        if self._replacements:
            raise ValueError(f"tokens not found in the dumped YAML: {sorted(self._replacements)}")
        return "\n".join(out) + "\n"

    def _token(self, replace: Callable[[str, str, int], str]) -> str:
        token = f"LLMAZCHARTTOKEN{next(self._counter)}X"
        self._replacements[token] = replace
        return token


def _dash(line: str) -> int:
    """The indentation of a list item's dash."""
    return len(line) - len(line.lstrip(" "))


def _around(line: str, opening: str, items: list[Any]) -> str:
    """`items` dumped at the indentation of the list item `line`, between `opening` and `{{- end }}`."""
    pad = " " * _dash(line)
    body = [pad + item for item in dump(items).replace("{{", ESCAPED_OPEN).splitlines()]
    return "\n".join([pad + opening, *body, pad + "{{- end }}"])
