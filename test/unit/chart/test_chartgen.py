"""The generated chart: committed files are current, generated from config/ alone, and describe every value."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz.apis import constants as c
from llmaz_dev.chartgen import SourceError, Sources, read_sources, render_chart, write_chart
from llmaz_dev.chartgen.objects import manager_args
from llmaz_dev.chartgen.values import Group, defaults, leaves, nodes, values_tree

from .conftest import CHART, REPO


def test_the_committed_chart_is_what_make_chart_generates(sources: Sources) -> None:
    rendered = render_chart(sources)
    committed = {p.relative_to(CHART).as_posix(): p.read_text() for p in CHART.rglob("*") if p.is_file()}
    stale = sorted(name for name in rendered if committed.get(name) != rendered[name])
    assert not stale, f"chart/ is out of date with config/, run `make chart`: {stale}"
    assert sorted(committed) == sorted(rendered), "chart/ holds files `make chart` does not write"


def test_the_crds_are_config_crd_bases_and_config_gie_verbatim(sources: Sources) -> None:
    bases = REPO / "config" / "crd" / "bases"
    gie = [path for path in (REPO / "config" / "gie").glob("*.yaml") if path.name != "kustomization.yaml"]
    rendered = render_chart(sources)
    crds = {name.removeprefix("crds/"): text for name, text in rendered.items() if name.startswith("crds/")}
    assert crds == {path.name: path.read_text() for path in [*bases.glob("*.yaml"), *gie]}
    assert "inference.networking.k8s.io_inferencepools.yaml" in crds


def test_chart_version_and_app_version_are_the_projects(sources: Sources) -> None:
    chart = yaml.safe_load(render_chart(sources)["Chart.yaml"])
    assert (chart["name"], chart["version"], chart["appVersion"]) == ("llmaz", sources.version, sources.version)


def _scratch_repo(tmp_path: Path) -> Path:
    """The files the generator reads, copied: config/, pyproject.toml and the LWS pin."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "config", repo / "config")
    shutil.copy(REPO / "pyproject.toml", repo / "pyproject.toml")
    (repo / "hack" / "cluster" / "lws").mkdir(parents=True)
    shutil.copy(REPO / "hack" / "cluster" / "lws" / "go.mod", repo / "hack" / "cluster" / "lws" / "go.mod")
    return repo


def test_a_change_in_config_changes_the_chart(kustomize: Path, tmp_path: Path) -> None:
    repo = _scratch_repo(tmp_path)
    manager = repo / "config" / "manager" / "manager.yaml"
    text = manager.read_text()
    manager.write_text(text.replace("replicas: 2", "replicas: 3").replace("memory: 256Mi", "memory: 1Gi"))
    backend = repo / "config" / "backends" / "tgi.yaml"
    backend.write_text(backend.read_text().replace("version: 2.3.1", "version: 2.4.0"))

    values = yaml.safe_load(render_chart(read_sources(kustomize, repo))["values.yaml"])
    assert values["controllerManager"]["replicas"] == 3
    assert values["controllerManager"]["manager"]["resources"]["limits"]["memory"] == "1Gi"
    assert values["backendRuntime"]["tgi"]["image"] == {
        "repository": "ghcr.io/huggingface/text-generation-inference",
        "tag": "2.4.0",
    }


@pytest.mark.parametrize(
    "args",
    [
        ["--leader-elect", "--namespace=llmaz-system"],
        ["--namespace=other"],
        ["--namespace=llmaz-system", "--namespace=llmaz-system"],
        [],
    ],
)
def test_the_generator_refuses_a_manager_whose_only_namespace_flag_is_not_first(args: list[str]) -> None:
    with pytest.raises(SourceError, match="--namespace="):
        manager_args({"args": args})


def test_writing_the_chart_removes_files_it_no_longer_generates(tmp_path: Path) -> None:
    (tmp_path / "templates" / "old").mkdir(parents=True)
    (tmp_path / "templates" / "old" / "gone.yaml").write_text("stale")
    write_chart(tmp_path, {"Chart.yaml": "name: llmaz\n", "templates/a.yaml": "a\n"})
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "Chart.yaml",
        "templates",
        "templates/a.yaml",
    ]


def test_values_yaml_parses_to_the_described_defaults_and_every_value_is_described(sources: Sources) -> None:
    tree = values_tree(sources)
    rendered = render_chart(sources)
    assert yaml.safe_load(rendered["values.yaml"]) == defaults(tree)
    table = rendered["README.md"]
    for path, value in leaves(tree):
        assert value.description, path
        assert f"| `{path}` |" in table, f"{path} is missing from the README's values table"


def test_every_map_of_the_schema_is_closed_and_the_charts_own_maps_require_their_keys(sources: Sources) -> None:
    tree = values_tree(sources)
    schema = json.loads(render_chart(sources)["values.schema.json"])
    own = {""} | {f".{path}" for path, node in nodes(tree) if isinstance(node, Group)}

    def maps(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
        if node.get("type") == "array":
            return maps(node.get("items", {}), f"{path}[]")
        if node.get("type") != "object" or "properties" not in node:
            return []
        found = [(path, node)]
        for name, child in node["properties"].items():
            found += maps(child, f"{path}.{name}")
        return found

    found = maps(schema, "")
    assert {".gateway.tolerations[]", ".controllerManager.affinity", ".gateway.httpRoute.parentRefs[]"} <= {
        path for path, _ in found
    }, "the Kubernetes types of the values are described too"
    for path, node in found:
        if path.endswith(".extraVolumes[]"):
            assert node["required"] == ["name"]  # a volume's sources are Kubernetes' to check
            continue
        assert node["additionalProperties"] is False, path
        if path in own:
            assert sorted(node["required"]) == sorted(node["properties"]), path


def test_llmaz_chart_defects_are_fixed_in_the_generated_chart(sources: Sources) -> None:
    rendered = render_chart(sources)
    assert not [name for name, text in rendered.items() if "cert-manager.io" in text]
    values = yaml.safe_load(rendered["values.yaml"])
    settings = yaml.safe_load(values["globalConfig"]["configData"])
    assert settings["init-container-image"] == c.DEFAULT_INIT_CONTAINER_IMAGE
    assert "#" not in values["globalConfig"]["configData"], "no setting is commented out"
    for toggle in ("leaderWorkerSet", "open-webui", "envoy-gateway", "envoy-ai-gateway", "kube-scheduler"):
        assert values[toggle] == {"enabled": False}, toggle
