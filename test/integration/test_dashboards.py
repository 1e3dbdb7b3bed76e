"""Every query of llmaz's Grafana dashboards (src/llmaz_dev/dashboards.py) parsed by promtool, the node tier's
(`llmaz_dev.envtest.prometheus.promtool`): each query, its dashboard variables given values, is written as a
recording rule of a scratch rule file and `promtool check rules` parses it as Prometheus would."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from llmaz_dev import dashboards as d
from llmaz_dev.envtest.prometheus import promtool

VALUES = {"job": d.ALL, "model": "tiny", "__rate_interval": "5m"}


def check(directory: Path, expressions: list[str]) -> subprocess.CompletedProcess[str]:
    rules = [{"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(expressions)]
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}, sort_keys=False))
    return subprocess.run([str(promtool()), "check", "rules", str(path)], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("dashboard", d.DASHBOARDS, ids=lambda b: b.uid)
def test_promtool_parses_every_query_of_the_dashboard(dashboard: d.Dashboard, tmp_path: Path) -> None:
    expressions = [d.substituted(q.expr, VALUES) for panel in dashboard.panels for q in panel.queries]
    result = check(tmp_path, expressions)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_query_that_does_not_parse(tmp_path: Path) -> None:
    result = check(tmp_path, ["sum by (model) (rate(llmaz_gateway_requests_total[5m])"])
    assert result.returncode != 0, result.stdout
