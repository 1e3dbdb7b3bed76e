"""The chart's tests: the pinned kustomize and helm (`make kustomize`, `make helm`), and objects keyed as the
golden comparison keys them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz_dev.chartgen import Sources, read_sources
from llmaz_dev.envtest._assets import tool_path
from llmaz_dev.envtest.helm import Helm

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "chart"
Key = tuple[str, str, str]


def keyed(text: str) -> dict[Key, dict[str, Any]]:
    """(kind, namespace, name) -> object, for every document of a multi-document YAML stream."""
    found: dict[Key, dict[str, Any]] = {}
    for doc in yaml.safe_load_all(text):
        if doc:
            metadata = doc["metadata"]
            found[(doc["kind"], metadata.get("namespace", ""), metadata["name"])] = doc
    return found


@pytest.fixture(scope="session")
def kustomize() -> Path:
    return tool_path("kustomize")


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def sources(kustomize: Path) -> Sources:
    return read_sources(kustomize, REPO)
