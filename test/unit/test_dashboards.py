"""The Grafana dashboards of config/grafana against their generator and the code: the committed files are what
`llmaz_dev.dashboards` generates (a hand edit fails here), every metric a panel reads is one llmaz's processes or a
known engine export, and every panel either must have data or says why it may not. promtool parses the queries in
test/integration/test_dashboards.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from llmaz.gateway.routing.engines import ENGINES
from llmaz_dev import dashboards as d

from .test_alert_rules import exported, gateway_registry, manager_registry, metric_names

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "config" / "grafana"
# Engine metrics the panels may read beyond those the gateway's routing reads (ENGINES): llama.cpp's `--metrics`
# and vLLM's documented series, histograms by their bucket series.
ENGINE_DOCUMENTED = {
    "llamacpp:prompt_tokens_seconds",
    "llamacpp:predicted_tokens_seconds",
    "llamacpp:n_decode_total",
    "llamacpp:n_busy_slots_per_decode",
    "vllm:prefix_cache_queries_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:inter_token_latency_seconds_bucket",
    "vllm:time_per_output_token_seconds_bucket",
}
PROMETHEUS_OWN = {"up"}


def engine_names() -> set[str]:
    names: set[str] = set()
    for engine in ENGINES.values():
        m = engine.metrics
        if m is None:
            continue
        names |= {m.running, m.waiting, *m.utilisation, *m.activity, m.prompt_tokens or "", m.cached_tokens or ""}
    return names - {""} | ENGINE_DOCUMENTED


def test_the_committed_dashboards_and_kustomization_are_what_the_generator_writes() -> None:
    committed = {str(p.relative_to(GRAFANA)): p.read_text() for p in GRAFANA.rglob("*") if p.is_file()}
    generated = d.generated()
    stale = sorted(name for name in generated.keys() | committed.keys() if committed.get(name) != generated.get(name))
    assert not stale, f"config/grafana is out of date with src/llmaz_dev/dashboards.py, run `make manifests`: {stale}"


def test_a_hand_edited_dashboard_is_rewritten_and_a_removed_one_deleted(tmp_path: Path) -> None:
    d.write(tmp_path)
    edited = tmp_path / "dashboards" / d.MANAGER.file_name
    edited.write_text(edited.read_text().replace("Reconciles", "Edited"))
    (tmp_path / "dashboards" / "gone.json").write_text("{}")
    d.write(tmp_path)
    assert edited.read_text() == d.generated()[f"dashboards/{d.MANAGER.file_name}"]
    assert not (tmp_path / "dashboards" / "gone.json").exists()


def test_each_dashboard_is_a_configmap_with_the_grafana_sidecar_label_and_a_stable_name() -> None:
    kustomization = yaml.safe_load((GRAFANA / "kustomization.yaml").read_text())
    assert kustomization["generatorOptions"]["disableNameSuffixHash"] is True
    assert kustomization["generatorOptions"]["labels"][d.LABEL] == "1"
    files = {g["name"]: g["files"] for g in kustomization["configMapGenerator"]}
    assert files == {d.config_map_name(b): [f"dashboards/{b.file_name}"] for b in d.DASHBOARDS}
    assert set(files) == {"llmaz-dashboard-manager", "llmaz-dashboard-gateway", "llmaz-dashboard-engines",
                          "llmaz-dashboard-model"}  # fmt: skip


@pytest.mark.parametrize("dashboard", d.DASHBOARDS, ids=lambda b: b.uid)
def test_every_metric_a_panel_reads_is_exported_by_llmaz_or_a_known_engine(dashboard: d.Dashboard) -> None:
    known = exported(manager_registry()) | exported(gateway_registry()) | engine_names() | PROMETHEUS_OWN
    for panel in dashboard.panels:
        for query in panel.queries:
            used = metric_names(query.expr)
            assert used, f"{dashboard.uid} / {panel.title}: no metric in {query.expr}"
            assert used <= known, f"{dashboard.uid} / {panel.title} reads unknown metrics: {sorted(used - known)}"
    for variable in dashboard.variables:
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable.query)
        assert match, f"{dashboard.uid}: ${variable.name} is not label_values(series, label): {variable.query}"
        assert metric_names(match.group(1)) <= known, variable.query


def test_the_names_check_rejects_a_metric_nobody_exports() -> None:
    known = exported(gateway_registry()) | engine_names()
    assert metric_names("sum(rate(llmaz_gateway_routing_decisions_total[5m]))") - known == {
        "llmaz_gateway_routing_decisions_total"
    }


@pytest.mark.parametrize("dashboard", d.DASHBOARDS, ids=lambda b: b.uid)
def test_every_variable_a_query_uses_is_defined_by_its_dashboard(dashboard: d.Dashboard) -> None:
    values = {v.name: "x" for v in dashboard.variables}
    for panel in dashboard.panels:
        assert panel.queries, f"{panel.title}: no query"
        for query in panel.queries:
            assert "$" not in d.substituted(query.expr, values), query.expr


def test_a_variable_the_dashboard_does_not_define_is_named_in_the_error() -> None:
    with pytest.raises(KeyError, match=r"\$model"):
        d.substituted('up{model="$model"}', {})


def test_the_json_is_what_grafana_reads_a_datasource_variable_and_one_target_per_query() -> None:
    for dashboard in d.DASHBOARDS:
        document = json.loads((GRAFANA / "dashboards" / dashboard.file_name).read_text())
        assert document["uid"] == dashboard.uid
        assert document["templating"]["list"][0]["type"] == "datasource"
        for panel, data in zip(document["panels"], dashboard.panels, strict=True):
            assert [t["expr"] for t in panel["targets"]] == [q.expr for q in data.queries]
            assert panel["datasource"]["uid"] == "${datasource}"


def test_the_model_dashboard_shows_one_model_by_the_gateways_model_label() -> None:
    (variable,) = d.MODEL.variables
    assert (variable.name, variable.regex_all) == ("model", False)
    assert "llmaz_gateway_" in variable.query
    assert variable.query.endswith(", model)")
    for panel in d.MODEL.panels:
        for query in panel.queries:
            assert 'model="$model"' in query.expr, f"{panel.title}: {query.expr}"
