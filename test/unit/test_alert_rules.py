"""config/prometheus's alerts and monitors against the code: every metric an alert reads is one the manager or
llmaz-gateway really exports (their registries, built as the processes build them, compared by name); every alert
has a runbook section in docs/operations.md and unit tests for promtool that show it firing and not firing; the
monitors select what llmaz really labels. promtool itself runs the rules in test/integration/test_alert_rules.py."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from llmaz.apis import constants as c
from llmaz.gateway.proxy.metrics import GatewayMetrics, ModelReadiness
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.signals import EngineSignals
from llmaz.gateway.scaling.autoscaler import AutoscalerMetrics
from llmaz_dev.testing.informer import FakeInformer

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "config" / "prometheus"
ALERTS = PROMETHEUS / "alerts.yaml"
PROMTOOL_TESTS = REPO / "test" / "promtool" / "alerts_test.yaml"
OPERATIONS = REPO / "docs" / "operations.md"

# The sample names a family of each type exposes (prometheus_client names a counter's family without `_total`).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
    "unknown": ("",),
}
_TOKEN = re.compile(
    r"""
      "(?:[^"\\]|\\.)*" | '(?:[^'\\]|\\.)*'     # strings
    | \{[^}]*\}                                 # label matchers
    | \[[^\]]*\]                                # ranges and subqueries
    | (?:\d+(?:ms|[smhdwy]))+                    # durations (offsets)
    | \d+(?:\.\d+)?(?:[eE][+-]?\d+)?            # numbers
    | [A-Za-z_:][A-Za-z0-9_:]*                  # names: metrics, functions, keywords
    | \S                                        # operators, parentheses
    """,
    re.VERBOSE,
)
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: names that are not functions or aggregations (followed by a
    parenthesis, `by` or `without`), keywords or label lists."""
    tokens = _TOKEN.findall(expr)
    names: set[str] = set()
    i = 0
    while i < len(tokens):
        token, following = tokens[i], tokens[i + 1] if i + 1 < len(tokens) else ""
        if token in _LABEL_LISTS and following == "(":
            i = tokens.index(")", i)  # label lists hold no parentheses
        elif _NAME.fullmatch(token) and following not in {"(", "by", "without"} and token.lower() not in _KEYWORDS:
            names.add(token)
        i += 1
    return names


def exported(registry: CollectorRegistry) -> set[str]:
    return {family.name + suffix for family in registry.collect() for suffix in _SUFFIXES.get(family.type, ("",))}


def manager_registry() -> CollectorRegistry:
    """The manager's registry once its entry point is imported (every controller, webhook and runtime metric), and
    the certificate rotator's, which the entry point imports only when it manages certificates."""
    importlib.import_module("llmaz.manager.__main__")
    importlib.import_module("llmaz.certs.rotator")
    from llmaz.runtime.metrics import REGISTRY

    return REGISTRY


def gateway_registry() -> CollectorRegistry:
    """The gateway's registry, filled as `llmaz.gateway.__main__.add_runnables` fills it."""
    registry = CollectorRegistry(auto_describe=True)
    metrics = GatewayMetrics(registry)
    catalog = Catalog(FakeInformer(), FakeInformer(), FakeInformer(), [FakeInformer()], FakeInformer())
    ModelReadiness(catalog, metrics.registry)
    EngineSignals(catalog, registry=metrics.registry)
    AutoscalerMetrics(metrics.registry)
    return registry


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(ALERTS.read_text())["spec"]["groups"]
    return groups


def alerts() -> Iterator[tuple[str, dict[str, Any]]]:
    for group in rule_groups():
        for rule in group["rules"]:
            yield group["name"], rule


def test_metric_names_are_found_in_selectors_and_not_in_functions_labels_or_numbers() -> None:
    expr = (
        'sum by (model, code) (rate(a_total{code=~"5..", x="by"}[5m])) / on (model) group_left (pod) b'
        ' > 1e3 and absent(c{name="d"}) unless bool max without (e) (f) - time() < 80 * 86400 or g offset 5m'
    )
    assert metric_names(expr) == {"a_total", "b", "c", "f", "g"}


def test_the_exported_names_include_each_type_as_prometheus_serves_it() -> None:
    registry = gateway_registry()
    names = exported(registry)
    assert {"llmaz_gateway_requests_total", "llmaz_gateway_request_duration_seconds_bucket"} <= names
    assert {"llmaz_gateway_requests_held", "llmaz_gateway_model_ready_endpoints"} <= names
    assert "llmaz_gateway_requests" not in names


@pytest.mark.parametrize(
    ("group", "registry"),
    [("llmaz-manager", manager_registry), ("llmaz-serving", gateway_registry)],
    ids=["manager", "gateway"],
)
def test_every_metric_an_alert_reads_is_exported_by_the_process_it_is_about(group: str, registry: Any) -> None:
    names = exported(registry())
    rules = [rule for name, rule in alerts() if name == group]
    assert rules, f"no group {group} in {ALERTS}"
    for rule in rules:
        used = metric_names(rule["expr"])
        assert used, f"{rule['alert']}: no metric found in its expression"
        assert used <= names, f"{rule['alert']} reads metrics no registry exports: {sorted(used - names)}"


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    found = set()
    for line in markdown.splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            text = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            found.add(text.replace(" ", "-"))
    return found


def test_every_alert_links_its_own_runbook_section_of_docs_operations() -> None:
    sections = anchors(OPERATIONS.read_text())
    for _, rule in alerts():
        url = rule["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == "docs/operations.md", f"{rule['alert']}: {url}"
        assert anchor == rule["alert"].lower(), f"{rule['alert']} links another alert's section: {url}"
        assert anchor in sections, f"{rule['alert']}: docs/operations.md has no section #{anchor}"


def test_every_alert_has_unit_tests_that_fire_it_and_keep_it_quiet() -> None:
    cases = [case for test in yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    fired = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    names = {rule["alert"] for _, rule in alerts()}
    assert names - fired == set(), "alerts never fired by a unit test"
    assert names - quiet == set(), "alerts never shown quiet by a unit test"
    assert fired | quiet <= names, "unit tests of alerts that do not exist"


def test_every_alert_has_a_severity_summary_and_description() -> None:
    for _, rule in alerts():
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), rule["alert"]


def test_the_engine_monitor_selects_the_group_leaders_of_model_pods_on_their_serving_port() -> None:
    monitor = yaml.safe_load((PROMETHEUS / "engine_monitor.yaml").read_text())
    selector = monitor["spec"]["selector"]
    assert selector["matchLabels"] == {c.LWS_WORKER_INDEX_LABEL: "0"}
    assert {(e["key"], e["operator"]) for e in selector["matchExpressions"]} == {
        (c.MODEL_NAME_LABEL, "Exists"),
        (c.LWS_NAME_LABEL, "Exists"),
    }
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == (c.HTTP_PORT_NAME, "/metrics")
    sources = {rule["targetLabel"]: rule["sourceLabels"] for rule in endpoint["relabelings"]}
    assert sources["model"] == ["__meta_kubernetes_pod_label_" + re.sub(r"[^\w]", "_", c.MODEL_NAME_LABEL)]


def test_the_gateway_monitor_scrapes_the_port_only_the_gateways_metrics_service_has() -> None:
    monitor = yaml.safe_load((PROMETHEUS / "gateway_monitor.yaml").read_text())
    services = list(yaml.safe_load_all((REPO / "config" / "gateway" / "service.yaml").read_text()))
    (endpoint,) = monitor["spec"]["endpoints"]
    wanted = monitor["spec"]["selector"]["matchLabels"].items()
    selected = [s for s in services if wanted <= s["metadata"]["labels"].items()]
    assert sorted(s["metadata"]["name"] for s in selected) == ["gateway", "gateway-epp", "gateway-metrics"]
    with_port = [s["metadata"]["name"] for s in selected if endpoint["port"] in {p["name"] for p in s["spec"]["ports"]}]
    assert with_port == ["gateway-metrics"]
