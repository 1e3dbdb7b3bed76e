"""pytest fixtures for tests against a real API server.

Enable with `pytest_plugins = ["llmaz_dev.envtest.pytest_plugin"]` in a conftest.py.

Fixtures:
- `control_plane` (session): a started `ControlPlane` with the CRDs installed, stopped (and checked for
  leftover processes and ports) when the session ends. With `USE_EXISTING_CLUSTER=true` it is an
  `ExistingCluster` for the kubeconfig in `KUBECONFIG` instead; `restart_apiserver()`/`compact_etcd()` raise.
- `kubeconfig` (session): the kubeconfig path of `control_plane`.
- `namespace` (function): a fresh namespace named after the test, deleted afterwards.
- `admin_api_client` (function, async): a kubernetes_asyncio `ApiClient` with the admin identity.

CRDs come from the `llmaz_envtest_crd_paths` ini option (paths relative to the rootdir; default
`config/crd/bases` when that directory exists) plus the LeaderWorkerSet CRD from the assets.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from llmaz_dev.envtest._cluster import Cluster
from llmaz_dev.envtest._existing import ExistingCluster
from llmaz_dev.envtest.control_plane import ControlPlane

_CRD_PATHS_INI = "llmaz_envtest_crd_paths"
_DEFAULT_CRD_PATH = "config/crd/bases"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(_CRD_PATHS_INI, "CRD files or directories installed into the test control plane", "linelist")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs a real kube-apiserver and etcd (llmaz_dev.envtest)")


@pytest.fixture(scope="session")
def control_plane(pytestconfig: pytest.Config) -> Iterator[Cluster]:
    crd_paths = _crd_paths(pytestconfig)
    if os.environ.get("USE_EXISTING_CLUSTER", "").lower() == "true":
        existing = ExistingCluster(Path(os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config"))
        try:
            existing.install_crds(crd_paths)
            yield existing
        finally:
            existing.close()
        return
    with ControlPlane(crd_paths=crd_paths) as started:
        yield started


@pytest.fixture(scope="session")
def kubeconfig(control_plane: Cluster) -> Path:
    return control_plane.kubeconfig


@pytest.fixture
def namespace(control_plane: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = control_plane.create_namespace(request.node.name)
    yield name
    control_plane.delete_namespace(name)


@pytest_asyncio.fixture
async def admin_api_client(kubeconfig: Path) -> AsyncIterator[Any]:
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        yield api_client


def _crd_paths(pytestconfig: pytest.Config) -> list[Path]:
    configured: list[str] = pytestconfig.getini(_CRD_PATHS_INI)
    root = pytestconfig.rootpath
    if configured:
        return [root / path for path in configured]
    default = root / _DEFAULT_CRD_PATH
    return [default] if default.is_dir() else []
