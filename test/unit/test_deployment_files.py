"""The files that ship llmaz agree with each other: the image build, the local overlay and the ServiceMonitor.

The Dockerfile is not built here (no container runtime); these checks catch what would break it or the pod.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import yaml

from llmaz.apis import constants as c
from llmaz.apis.quantity import parse_quantity
from llmaz_dev.chartgen.sources import kustomize_build
from llmaz_dev.envtest._assets import tool_path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile").read_text()


def _instructions(keyword: str, dockerfile: str = DOCKERFILE) -> list[str]:
    joined = dockerfile.replace("\\\n", " ")
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.upper().startswith(keyword + " ")]


def _ignored(path: str) -> bool:
    """Docker's rule: the last matching .dockerignore pattern wins; `!` re-includes; a pattern matching a directory
    matches what is under it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for line in (REPO / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/").removeprefix("**/")
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes) or fnmatch.fnmatch(parts[-1], pattern):
            ignored = not negated
    return ignored


def test_everything_the_dockerfile_copies_exists_and_reaches_the_build_context() -> None:
    copies = [c for c in _instructions("COPY") if not c.startswith("--from")]
    assert copies
    for copy in copies:
        *sources, _destination = copy.split()
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: missing"
            assert not _ignored(source.rstrip("/")), f"COPY {source}: excluded by .dockerignore"


def test_the_image_entrypoint_is_the_manager_script_the_package_installs() -> None:
    (entrypoint,) = _instructions("ENTRYPOINT")
    program = yaml.safe_load(entrypoint)[0]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[program] == "llmaz.manager.__main__:main"
    installed = {e.name: e.value for e in entry_points(group="console_scripts") if e.dist and e.dist.name == "llmaz"}
    assert installed.get(program) == "llmaz.manager.__main__:main", "the installed package provides the entry point"
    manager = _manifests(REPO / "config" / "manager" / "manager.yaml")["Deployment"]
    assert manager["spec"]["template"]["spec"]["containers"][0]["command"] == [program]


def test_the_image_runs_as_a_numeric_non_root_user_on_python_3_11_slim() -> None:
    (user,) = _instructions("USER")
    uid = user.split(":")[0]
    assert re.fullmatch(r"[0-9]+", uid), "runAsNonRoot can only verify a numeric UID"
    assert int(uid) != 0
    assert any("python:3.11-slim" in line for line in _instructions("ARG") + _instructions("FROM"))
    assert "PYTHONDONTWRITEBYTECODE=1" in DOCKERFILE, "a read-only root filesystem cannot take .pyc files"


def _manifests(path: Path) -> dict[str, Any]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(path.read_text()) if doc}


def test_the_servicemonitor_selects_the_metrics_service_by_its_labels_and_port_name() -> None:
    monitor = _manifests(REPO / "config" / "prometheus" / "monitor.yaml")["ServiceMonitor"]
    service = _manifests(REPO / "config" / "default" / "manager_metrics_service.yaml")["Service"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    ports = {port["name"] for port in service["spec"]["ports"]}
    assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} <= ports


def _webhook_paths(path: Path, key: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for doc in yaml.safe_load_all(path.read_text()):
        if doc:
            found[doc["kind"]] = {w["name"]: w["clientConfig"][key] for w in doc["webhooks"]}
    return found


def test_the_local_overlay_calls_every_webhook_by_url_at_its_generated_path() -> None:
    generated = _webhook_paths(REPO / "config" / "webhook" / "manifests.yaml", "service")
    local = _webhook_paths(REPO / "config" / "local" / "webhook" / "url_clientconfig_patch.yaml", "url")
    assert local.keys() == generated.keys()
    for kind, hooks in generated.items():
        assert {name: f"https://127.0.0.1:9443{svc['path']}" for name, svc in hooks.items()} == local[kind]


def test_the_default_loader_image_is_the_projects_own_versioned_with_the_manager() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    expected = f"llmaz-model-loader:v{version}"
    assert expected == c.DEFAULT_INIT_CONTAINER_IMAGE
    for path in ("config/default/configmap.yaml", "config/dev/global-config.yaml"):
        (config_map,) = [d for d in yaml.safe_load_all((REPO / path).read_text()) if d["kind"] == "ConfigMap"]
        settings = yaml.safe_load(config_map["data"]["config.data"])
        assert settings["init-container-image"] == expected, path
    makefile = (REPO / "Makefile").read_text()
    assert "LOADER_IMG ?= llmaz-model-loader:v$(VERSION)" in makefile
    assert "IMG ?= llmaz:v$(VERSION)" in makefile


def test_the_envoy_image_builds_from_its_lock_file_and_runs_the_binary_it_installs_as_non_root() -> None:
    dockerfile = (REPO / "Dockerfile.envoy").read_text()
    for copy in [line for line in _instructions("COPY", dockerfile) if not line.startswith("--from")]:
        *sources, _destination = copy.split()
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: missing"
            assert not _ignored(source.rstrip("/")), f"COPY {source}: excluded by .dockerignore"
    (entrypoint,) = _instructions("ENTRYPOINT", dockerfile)
    (program,) = yaml.safe_load(entrypoint)
    assert f'install -m 0755 "$purelib/envoy/_bin/envoy" {program}' in dockerfile
    assert f"COPY --from=install {program} {program}" in dockerfile
    (user,) = _instructions("USER", dockerfile)
    assert re.fullmatch(r"[1-9][0-9]*:[0-9]+", user), "runAsNonRoot can only verify a numeric, non-root UID"
    makefile = (REPO / "Makefile").read_text()
    assert "ENVOY_IMG ?= llmaz-envoy:v$(VERSION)" in makefile
    assert "edit set image controller=$(IMG) envoy=$(ENVOY_IMG)" in makefile, "make deploy sets Envoy's image"


def test_on_the_node_the_gateway_asks_for_more_cpu_than_an_engine_pod() -> None:
    """Engines on CPU keep the node's cores busy, and the kernel shares them by request: a gateway that asks for less
    than an engine waits behind the engines on every request (docs/gateway.md, Performance)."""
    built = kustomize_build(tool_path("kustomize"), REPO / "config" / "node")
    found = {(doc["kind"], doc["metadata"]["name"]): doc for doc in built}
    gateway = found["Deployment", "llmaz-gateway"]["spec"]["template"]["spec"]["containers"][0]
    engine = found["BackendRuntime", "llamacpp"]["spec"]["recommendedConfigs"][0]
    gateway_cpu = parse_quantity(gateway["resources"]["requests"]["cpu"])
    engine_cpu = parse_quantity(engine["resources"]["requests"]["cpu"])
    assert gateway_cpu > engine_cpu, (gateway_cpu, engine_cpu)
