"""The llmaz-manager entry point's handling of a configuration it cannot load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmaz.__main__ import main


def test_a_missing_kubeconfig_is_one_clear_error_and_exit_code_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENABLE_WEBHOOKS", "false")
    missing = tmp_path / "nope" / "kubeconfig"
    assert main(["--kubeconfig", str(missing), "--metrics-bind-address", "0", "--log-format", "json"]) == 1
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in (captured.out + captured.err).splitlines() if line.startswith("{")]
    (error,) = [line for line in lines if line["level"] == "error"]
    assert error["event"] == "cannot load the API server configuration"
    assert f"kubeconfig {missing} does not exist" in error["error"]
    assert "exception" not in error  # no traceback for a configuration mistake
