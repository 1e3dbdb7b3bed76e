"""config/prometheus/alerts.yaml judged by promtool, the one built with the node tier's Prometheus (v3.5.0, from the Go
module in hack/cluster/prometheus, by hack/cluster/build.sh --prometheus, which `make image-build` runs; found by
`llmaz_dev.envtest.prometheus.promtool`): `promtool check rules` accepts the rules as Prometheus loads them, and
`promtool test rules` runs test/promtool/alerts_test.yaml, where each alert fires and stays quiet. The same tests
against rules that never fire fail, which shows the firing expectations are checked.

promtool reads plain rule files: the PrometheusRule's `spec` (its `groups`) is written as `rules.yaml` beside a copy
of the test file in a scratch directory, the name the test file's `rule_files` gives. No control plane is needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest.prometheus import promtool

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "config" / "prometheus" / "alerts.yaml"
UNIT_TESTS = REPO / "test" / "promtool" / "alerts_test.yaml"


@pytest.fixture(scope="module")
def tool() -> Path:
    return promtool()


def rules() -> dict[str, Any]:
    rule = yaml.safe_load(ALERTS.read_text())
    assert rule["kind"] == "PrometheusRule"
    spec: dict[str, Any] = rule["spec"]
    return spec


def write_rules(directory: Path, groups: dict[str, Any]) -> None:
    (directory / "rules.yaml").write_text(yaml.safe_dump(groups, sort_keys=False))
    shutil.copy(UNIT_TESTS, directory / UNIT_TESTS.name)


def run(tool: Path, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool), *args], cwd=directory, capture_output=True, text=True, timeout=120, check=False)


def test_promtool_accepts_every_shipped_rule(tool: Path, tmp_path: Path) -> None:
    spec = rules()
    write_rules(tmp_path, spec)
    result = run(tool, tmp_path, "check", "rules", "rules.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(group["rules"]) for group in spec["groups"])
    assert f"SUCCESS: {count} rules found" in result.stdout, result.stdout


def test_every_alert_fires_and_stays_quiet_as_its_unit_tests_expect(tool: Path, tmp_path: Path) -> None:
    write_rules(tmp_path, rules())
    result = run(tool, tmp_path, "test", "rules", UNIT_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout, result.stdout


def test_rules_that_never_fire_fail_the_unit_tests_of_every_alert(tool: Path, tmp_path: Path) -> None:
    spec = rules()
    for group in spec["groups"]:
        for rule in group["rules"]:
            rule["expr"] = "vector(1) > 2"
    write_rules(tmp_path, spec)
    result = run(tool, tmp_path, "test", "rules", UNIT_TESTS.name)
    assert result.returncode != 0
    names = [rule["alert"] for group in spec["groups"] for rule in group["rules"]]
    report = result.stdout + result.stderr
    unfired = [name for name in names if f"alertname: {name}," not in report]
    assert unfired == [], f"no failing expectation reported for {unfired}:\n{report}"
