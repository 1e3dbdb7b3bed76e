"""The llmaz-manager entry point: a configuration it cannot load, and the flags that reach the manager and client."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from llmaz.controllers.setup import setup_controllers
from llmaz.manager.__main__ import controller_settings, duration, main, manager_options, parse_args, rest_config
from llmaz.runtime.client import Client, RestConfig
from llmaz.runtime.manager import Manager


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


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15s", 15.0), ("10s", 10.0), ("1m30s", 90.0), ("500ms", 0.5), ("1.5s", 1.5), ("1h", 3600.0), ("2", 2.0)],
)
def test_durations_are_go_durations_or_seconds(text: str, seconds: float) -> None:
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "2x", "15 s", "1m30", "ms5"])
def test_a_malformed_duration_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="invalid duration"):
        duration(text)


def test_leader_election_timings_and_client_limits_default_as_controller_runtime_and_the_client() -> None:
    args = parse_args([])
    options = manager_options(args)
    assert (options.lease_duration, options.renew_deadline, options.retry_period) == (15.0, 10.0, 2.0)
    assert (args.kube_api_qps, args.kube_api_burst) == (50.0, 100)


async def test_the_flags_reach_the_manager_and_the_client(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    args = parse_args(
        [
            f"--kubeconfig={kubeconfig}",
            "--leader-elect-lease-duration=30s",
            "--leader-elect-renew-deadline=20s",
            "--leader-elect-retry-period=4s",
            "--kube-api-qps=0",
            "--kube-api-burst=1",
        ]
    )
    options = manager_options(args)
    assert (options.lease_duration, options.renew_deadline, options.retry_period) == (30.0, 20.0, 4.0)
    config = await rest_config(args)
    assert (config.qps, config.burst) == (0.0, 1)


@pytest.mark.parametrize(
    "flags",
    [
        ["--leader-elect-renew-deadline=20s"],  # not below the 15 s lease
        ["--leader-elect-retry-period=9s"],  # no room for a retry before the 10 s deadline
        ["--kube-api-qps=10", "--kube-api-burst=0"],
        ["--reconcile-timeout=-1"],
    ],
)
def test_timings_or_limits_that_cannot_work_are_usage_errors(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(flags)
    assert exit_info.value.code == 2
    assert "llmaz-manager: error:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "seconds"), [([], 60.0), (["--reconcile-timeout=2m"], 120.0), (["--reconcile-timeout=0"], 0.0)]
)
async def test_the_reconcile_timeout_flag_reaches_every_controller(flags: list[str], seconds: float) -> None:
    client = Client(RestConfig(host="http://127.0.0.1:1"))
    try:
        controllers = setup_controllers(Manager(client), controller_settings(parse_args(flags)))
    finally:
        await client.close()
    assert len(controllers) >= 4
    assert {c.options.reconcile_timeout for c in controllers} == {seconds}
