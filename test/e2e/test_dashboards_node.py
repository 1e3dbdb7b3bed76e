"""llmaz's Grafana dashboards against the node's real Prometheus: after chat traffic through llmaz-gateway to a
llama.cpp Playground, every panel's query (src/llmaz_dev/dashboards.py, its dashboard variables given values) runs
on Prometheus's HTTP API. A query Prometheus rejects fails the test; so does one that returns nothing, unless its
panel says why it may be empty (`may_be_empty`: vLLM on a llama.cpp-only node, no failed admission, ...). The
Prometheus, its operator and config/prometheus are test_prometheus.py's fixture."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from llmaz_dev import dashboards as d
from llmaz_dev.envtest.objectstore import ObjectStore

from .serving import gateway_chat, routable, serve_chat
from .support import Environment, ModelNames, eventually, http_request
from .test_prometheus import prometheus  # noqa: F401  (the module's fixture, used by name)

pytestmark = pytest.mark.tier("node")
REQUESTS = 5
# Long enough for a rate to see two scrapes (the operator's default interval is 30s).
RATE_INTERVAL = "5m"


def run(prometheus_url: str, expression: str) -> tuple[str, int]:
    """("", series) for a query Prometheus answered, or (its error, 0)."""
    url = f"{prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': expression})}"
    status, body = http_request(url)
    try:
        answer = json.loads(body)
    except ValueError:
        return f"HTTP {status}: {body[:300]!r}", 0
    if status != 200 or answer.get("status") != "success":
        return f"HTTP {status}: {answer.get('errorType')}: {answer.get('error')}", 0
    return "", len(answer["data"]["result"])


def problems(prometheus_url: str, model: str) -> list[str]:
    """The queries that are invalid, and those returning nothing where their panel needs data."""
    values = {"job": d.ALL, "model": model, "__rate_interval": RATE_INTERVAL}
    found = []
    for dashboard in d.DASHBOARDS:
        for panel in dashboard.panels:
            for query in panel.queries:
                expression = d.substituted(query.expr, values)
                error, series = run(prometheus_url, expression)
                where = f"{dashboard.uid} / {panel.title} / {query.legend}: {expression}"
                if error:
                    found.append(f"invalid: {where}: {error}")
                elif series == 0 and not panel.may_be_empty:
                    found.append(f"empty: {where}")
    return found


def test_every_dashboard_query_is_valid_and_has_data_after_chat_traffic_through_the_gateway(
    e2e: Environment,
    namespace: str,
    models: ModelNames,
    object_store: ObjectStore,
    prometheus: str,  # noqa: F811
) -> None:
    model = serve_chat(e2e, namespace, models, object_store)
    routable(e2e, model)
    for _ in range(REQUESTS):
        status, body = gateway_chat(e2e, model)
        assert status == 200, body[:300]

    def all_answered() -> bool:
        found = problems(prometheus, model)
        assert not found, "\n".join(found)  # on timeout, the last list is the failure's message
        return True

    eventually(all_answered, within=300, what="every dashboard query valid and, where needed, not empty")
