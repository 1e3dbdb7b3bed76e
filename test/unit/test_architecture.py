"""Imports point one way, and what ships imports nothing that does not.

- Every package of `llmaz` declares the llmaz packages it may import (`RULES`): runtime knows nothing of llmaz;
  apis only itself and the runtime's pure value modules; builders only apis; the gateway, the scheduler extender
  and the webhooks only apis and runtime; the manager, the composition root, anything that ships.
- `llmaz_dev` (test clusters, fixtures, generators) may import `llmaz`; no module of `llmaz` imports `llmaz_dev`.
- No circle of modules, in `src/` or in `bench/`: two modules that import each other, directly or around a loop,
  are one module in two files.

The rules are checked on the source text (every `import` and `from ... import`, including ones inside functions;
not the ones under `if TYPE_CHECKING:`, which never run), so a wrong-way import fails here before it becomes a
tangle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
BENCH = ROOT / "bench"

# Modules of the runtime that import nothing and hold plain values: anything may use them.
RUNTIME_VALUES = ("llmaz.runtime.resource", "llmaz.runtime.timestamp")

# package prefix -> the llmaz packages it may import (itself always allowed); the most specific prefix applies.
RULES: dict[str, tuple[str, ...]] = {
    "llmaz": (),
    "llmaz.runtime": (),
    "llmaz.apis": RUNTIME_VALUES,
    "llmaz.certs": ("llmaz.runtime",),
    "llmaz.controllers": ("llmaz.apis", "llmaz.runtime", "llmaz.certs"),
    "llmaz.controllers.builders": ("llmaz.apis", *RUNTIME_VALUES),
    "llmaz.controllers.settings": ("llmaz.apis",),
    # The flavor decision and the fit are pure: objects and times in, answers out; the informers are `capacity`'s.
    "llmaz.controllers.flavors.fit": ("llmaz.apis", *RUNTIME_VALUES),
    "llmaz.controllers.flavors.decision": (
        "llmaz.apis",
        "llmaz.controllers.builders",
        "llmaz.controllers.flavors.fit",
        *RUNTIME_VALUES,
    ),
    "llmaz.webhooks": ("llmaz.apis", "llmaz.runtime"),
    "llmaz.loader": ("llmaz.apis.constants", "llmaz.apis.modelpath", "llmaz.apis.uri"),
    "llmaz.gateway": ("llmaz.apis", "llmaz.runtime"),
    # The gateway's parts: the data path uses routing, scaling and flow control, scaling and flow control use
    # routing, never back.
    "llmaz.gateway.routing": ("llmaz.apis", "llmaz.runtime"),
    "llmaz.gateway.scaling": ("llmaz.apis", "llmaz.runtime", "llmaz.gateway.routing"),
    "llmaz.gateway.flow": ("llmaz.apis", "llmaz.runtime", "llmaz.gateway.routing"),
    "llmaz.gateway.proxy": (
        "llmaz.apis",
        "llmaz.runtime",
        "llmaz.gateway.routing",
        "llmaz.gateway.scaling",
        "llmaz.gateway.flow",
    ),
    # The Endpoint Picker is the proxy's sibling: the same routing, holding and keys behind another gateway, with the
    # proxy's refusals, key check and limits, usage reading and held-requests gauge, never the proxy's server.
    "llmaz.gateway.epp": (
        "llmaz.apis",
        "llmaz.runtime",
        "llmaz.gateway.routing",
        "llmaz.gateway.scaling",
        "llmaz.gateway.proxy.auth",
        "llmaz.gateway.proxy.errors",
        "llmaz.gateway.proxy.limits",
        "llmaz.gateway.proxy.metrics",
        "llmaz.gateway.proxy.usage",
    ),
    "llmaz.schedext": ("llmaz.apis", "llmaz.runtime"),
    "llmaz.manager": ("llmaz",),
    # Development tooling: anything of llmaz, and itself.
    "llmaz_dev": ("llmaz",),
    # The chart generator reads config/ through kustomize, never the code it deploys.
    "llmaz_dev.chartgen": (),
}


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def _import_statements(path: Path) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Every absolute import of `path` that runs: (`m`, ()) for `import m`, (`m`, (`n`, ...)) for `from m import n`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = _type_checking_lines(tree)
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, tuple(alias.name for alias in node.names)


def _imports(path: Path) -> Iterator[str]:
    """The modules and names `path` imports, `from m import n` as both `m` and `m.n`."""
    for module, names in _import_statements(path):
        yield module
        yield from (f"{module}.{name}" for name in names)


def _sources(base: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    return {_module_name(p, base): p for package in packages for p in sorted((base / package).rglob("*.py"))}


SOURCES = _sources(SRC, ("llmaz", "llmaz_dev"))
BENCH_SOURCES = _sources(BENCH, ("suite",)) | {p.stem: p for p in sorted(BENCH.glob("*.py"))}
MODULES = sorted(SOURCES.items())


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _rule(module: str) -> tuple[str, tuple[str, ...]] | None:
    prefixes = [p for p in RULES if _within(module, p)]
    if not prefixes:
        return None
    prefix = max(prefixes, key=len)
    return prefix, RULES[prefix]


def _graph(sources: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of `sources` it imports: `from m import n` counts as `m.n` where that is a module, else
    as `m` (a name `m` defines or re-exports)."""

    def owner(name: str) -> str:
        while name and name not in sources:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for module, path in sources.items():
        targets: set[str] = set()
        for imported, names in _import_statements(path):
            modules = [f"{imported}.{n}" for n in names if f"{imported}.{n}" in sources]
            if len(modules) < len(names) or not names:
                modules.append(imported)
            targets.update(owner(m) for m in modules)
        graph[module] = targets - {module, ""}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_imports_point_the_allowed_way(module: str, path: Path) -> None:
    imports = sorted({i for i in _imports(path) if _within(i, "llmaz") or _within(i, "llmaz_dev")})
    if _within(module, "llmaz"):
        leaked = [i for i in imports if _within(i, "llmaz_dev")]
        assert not leaked, f"{module} ships, but imports development tooling {leaked}"
    rule = _rule(module)
    assert rule is not None, f"{module} is under no rule: add its package to RULES"
    prefix, allowed = rule
    wrong = [i for i in imports if not _within(i, prefix) and not any(_within(i, a) for a in allowed)]
    assert not wrong, f"{module} may import only {prefix} and {allowed}, but imports {wrong}"


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert _circles(_graph(SOURCES)) == []


def test_no_modules_of_the_bench_import_each_other_in_a_circle() -> None:
    assert _circles(_graph(BENCH_SOURCES)) == []


def test_a_circle_is_found_however_long_it_is() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_imports_under_type_checking_do_not_count(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import llmaz_dev.envtest\nimport os\n")
    assert "llmaz_dev.envtest" not in set(_imports(module))
    assert "os" in set(_imports(module))


def test_the_rules_see_the_packages_they_guard() -> None:
    names = set(SOURCES)
    for prefix in RULES:
        assert any(_within(n, prefix) for n in names), f"RULES names {prefix}, which is not in src/"
    for part in ("proxy", "routing", "scaling", "flow"):
        assert f"llmaz.gateway.{part}" in names, part
    assert {"llmaz.controllers.flavors.fit", "llmaz.controllers.flavors.decision"} <= names
    assert {"llmaz_dev.envtest", "llmaz_dev.testing", "llmaz_dev.crdgen", "llmaz_dev.chartgen"} <= names
    assert "suite.report" in BENCH_SOURCES
