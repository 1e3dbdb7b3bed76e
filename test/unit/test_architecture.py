"""Imports point one way: runtime knows nothing of llmaz, apis nothing but itself (and the runtime's `Resource`, a
value type that imports nothing, to name its resources with), builders only apis, and the gateway and the scheduler
extender only apis and runtime (they read the same objects as the controllers but never call into them).

The rules are checked on the source text (every `import` and `from ... import`, including ones inside functions),
so a wrong-way import fails here before it becomes a tangle.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

# package prefix -> the llmaz packages it may import (itself always allowed)
RULES: dict[str, tuple[str, ...]] = {
    "llmaz.runtime": (),
    "llmaz.apis": ("llmaz.runtime.resource",),
    "llmaz.controllers.builders": ("llmaz.apis",),
    # The flavor decision and the fit are pure: objects and times in, answers out; the informers are `capacity`'s.
    "llmaz.controllers.flavors.fit": ("llmaz.apis",),
    "llmaz.controllers.flavors.decision": ("llmaz.apis", "llmaz.controllers.builders", "llmaz.controllers.flavors.fit"),
    "llmaz.settings": ("llmaz.apis",),
    "llmaz.loader": ("llmaz.apis.constants", "llmaz.apis.modelpath", "llmaz.apis.uri"),
    "llmaz.gateway": ("llmaz.apis", "llmaz.runtime"),
    # The gateway's three parts: the data path uses routing and scaling, scaling uses routing, never back.
    "llmaz.gateway.routing": ("llmaz.apis", "llmaz.runtime"),
    "llmaz.gateway.scaling": ("llmaz.apis", "llmaz.runtime", "llmaz.gateway.routing"),
    "llmaz.gateway.proxy": ("llmaz.apis", "llmaz.runtime", "llmaz.gateway.routing", "llmaz.gateway.scaling"),
    "llmaz.schedext": ("llmaz.apis", "llmaz.runtime"),
    # The chart generator reads config/ through kustomize, never the code it deploys.
    "llmaz.chartgen": (),
}
# Development tooling (test clusters, fixtures, generators): pyproject.toml keeps it out of the wheel, so no module
# that ships may import it.
DEV_ONLY = tuple(
    path.removeprefix("src/").removesuffix(".py").replace("/", ".")
    for path in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"][
        "exclude"
    ]
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _llmaz_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return [name for name in found if name == "llmaz" or name.startswith("llmaz.")]


MODULES = sorted((_module_name(p), p) for p in (SRC / "llmaz").rglob("*.py"))


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_imports_point_the_allowed_way(module: str, path: Path) -> None:
    imports = _llmaz_imports(path)
    for prefix, allowed in RULES.items():
        if _within(module, prefix):
            wrong = [i for i in imports if not _within(i, prefix) and not any(_within(i, a) for a in allowed)]
            assert not wrong, f"{module} may import only {prefix} and {allowed}, but imports {wrong}"
    if not any(_within(module, t) for t in DEV_ONLY):
        leaked = [i for i in imports if any(_within(i, t) for t in DEV_ONLY)]
        assert not leaked, f"production module {module} imports development tooling {leaked}"


def test_the_rules_see_the_packages_they_guard() -> None:
    names = {m for m, _ in MODULES}
    assert any(_within(n, "llmaz.runtime") for n in names)
    assert any(_within(n, "llmaz.apis") for n in names)
    assert any(_within(n, "llmaz.gateway") for n in names)
    for part in ("proxy", "routing", "scaling"):
        assert any(_within(n, f"llmaz.gateway.{part}") for n in names), part
    assert any(_within(n, "llmaz.schedext") for n in names)
    assert "llmaz.envtest" in DEV_ONLY
    for dev in DEV_ONLY:
        assert any(_within(n, dev) for n in names), f"{dev} is excluded from the wheel but is not in src/llmaz"
    assert {"llmaz.controllers.flavors.fit", "llmaz.controllers.flavors.decision"} <= names
