"""The llmaz-gateway entry point: flags, the installed script, and clear failures for bad configuration."""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import structlog
from prometheus_client import CollectorRegistry, generate_latest

from llmaz.apis.routing import LEAST_OUTSTANDING, PREFIX_AWARE, RoutingWeights
from llmaz.gateway.__main__ import (
    activator_port,
    autoscaler_options,
    engine_signals,
    epp_options,
    gateway_metrics,
    gateway_options,
    main,
    manager_options,
    parse_args,
)
from llmaz.gateway.flow.control import FlowOptions
from llmaz.gateway.flow.saturation import SaturationOptions
from llmaz.gateway.routing.picker import RoutingOptions

from .support import Cluster


@pytest.fixture(autouse=True)
def _default_logging() -> Iterator[None]:
    """`main` configures structlog to write to the stderr capsys captures; later tests must not inherit that."""
    yield
    structlog.reset_defaults()


def error_lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in (captured.out + captured.err).splitlines() if line.startswith("{")]
    return [line for line in lines if line["level"] == "error"]


def test_the_package_installs_the_llmaz_gateway_script() -> None:
    installed = {e.name: e.value for e in entry_points(group="console_scripts") if e.dist and e.dist.name == "llmaz"}
    assert installed.get("llmaz-gateway") == "llmaz.gateway.__main__:main"


def test_flags_map_to_the_gateway_options() -> None:
    options = gateway_options(
        parse_args(
            [
                "--bind-address=127.0.0.1:9000",
                "--max-request-bytes=2048",
                "--header-timeout=3",
                "--max-connections=100",
                "--wake-timeout=8",
                "--hold-timeout=9",
                "--body-timeout=4",
                "--drain-timeout=5",
                "--upstream-connect-timeout=6",
                "--upstream-timeout=7",
                "--upstream-retries=0",
                "--resolve=10.0.0.1=127.0.0.1",
                "--resolve=fd00::1=::1",
            ]
        )
    )
    assert (options.bind_address, options.max_body_bytes, options.header_timeout) == ("127.0.0.1:9000", 2048, 3.0)
    assert (options.body_timeout, options.drain_timeout, options.max_connections) == (4.0, 5.0, 100)
    assert (options.wake_timeout, options.hold_timeout) == (8.0, 9.0)
    assert gateway_options(parse_args([])).hold_timeout == 30.0
    assert (options.proxy.connect_timeout, options.proxy.read_timeout, options.proxy.retries) == (6.0, 7.0, 0)
    assert options.proxy.resolve == {"10.0.0.1": "127.0.0.1", "fd00::1": "::1"}
    assert gateway_options(parse_args([])).proxy.resolve == {}


def test_routing_flags_map_to_the_routing_options() -> None:
    default = gateway_options(parse_args([])).routing
    assert default == RoutingOptions(PREFIX_AWARE, RoutingWeights(3.0, 2.0, 2.0), 1.25)
    assert gateway_options(parse_args(["--routing-strategy=least-outstanding"])).routing.strategy == LEAST_OUTSTANDING
    flags = [
        "--routing-strategy=prefix-aware",
        "--prefix-weight=5",
        "--queue-weight=0",
        "--utilisation-weight=1.5",
        "--load-factor=2",
    ]
    assert gateway_options(parse_args(flags)).routing == RoutingOptions(PREFIX_AWARE, RoutingWeights(5, 0, 1.5), 2.0)


def test_flow_control_is_off_by_default_and_its_flags_map_to_its_options() -> None:
    assert gateway_options(parse_args([])).flow == FlowOptions(False, SaturationOptions(4, 1.0, 256), 1000, 60.0)
    flags = [
        "--flow-control=true",
        "--flow-engine-waiting=2",
        "--flow-utilisation=0.95",
        "--flow-endpoint-requests=16",
        "--flow-queue-size=50",
        "--flow-queue-ttl=10",
        "--flow-reserved-slots=1",
        "--flow-reserved-band=7",
    ]
    expected = FlowOptions(True, SaturationOptions(2, 0.95, 16), 50, 10.0, reserved_slots=1, reserved_band=7)
    assert gateway_options(parse_args(flags)).flow == expected


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--flow-reserved-slots=-1", "must be 0 or more, got -1"),
        ("--flow-reserved-band=0", "must be a band from 1 to 9, got 0"),
        ("--flow-reserved-band=high", "must be an integer from 0 to 9"),
    ],
)
def test_a_reserve_flag_out_of_range_stops_the_gateway_naming_it(
    flag: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args([flag])
    error = capsys.readouterr().err
    assert flag.partition("=")[0] in error
    assert message in error


def test_the_activator_listens_on_the_api_host_and_needs_scale_to_zero() -> None:
    default = parse_args([])
    assert default.activator_port == 8001
    assert default.gateway_service == "llmaz-system/llmaz-gateway"  # outside a cluster
    assert gateway_options(default).activator_address == ":8001"
    local = parse_args(["--bind-address=127.0.0.1:9000", "--activator-port=9001", "--gateway-service=gw/gw"])
    assert (gateway_options(local).activator_address, local.gateway_service) == ("127.0.0.1:9001", "gw/gw")
    assert gateway_options(parse_args(["--bind-address=[::1]:9000"])).activator_address == "[::1]:8001"
    assert gateway_options(parse_args(["--activator-port=0"])).activator_address is None
    assert activator_port(parse_args(["--scale-to-zero=false"])) == 0


def test_the_endpoint_picker_is_off_by_default_and_listens_on_the_api_host() -> None:
    assert parse_args([]).epp_port == 0
    flags = ["--bind-address=127.0.0.1:9000", "--epp-port=9002", "--max-request-bytes=64", "--epp-fallbacks=2"]
    options = epp_options(parse_args(flags))
    assert (options.host, options.port, options.max_body_bytes, options.fallbacks) == ("127.0.0.1", 9002, 64, 2)
    assert epp_options(parse_args([])).fallbacks == 0
    assert epp_options(parse_args(["--epp-port=9002"])).host == ""


def test_the_endpoint_picker_holds_and_caps_requests_as_the_proxy_does() -> None:
    flags = ["--epp-port=9002", "--wake-timeout=8", "--hold-timeout=9", "--max-tokens-cap=100"]
    args = parse_args([*flags, "--default-max-tokens-reservation=50"])
    epp, proxy = epp_options(args), gateway_options(args)
    assert (epp.wake_timeout, epp.hold_timeout) == (proxy.wake_timeout, proxy.hold_timeout) == (8.0, 9.0)
    assert (epp.max_tokens_cap, epp.default_max_tokens_reservation) == (100, 50)
    assert (proxy.max_tokens_cap, proxy.default_max_tokens_reservation) == (100, 50)


def test_the_proxy_can_serve_on_an_address_of_its_own_while_the_picker_and_activator_keep_the_api_host() -> None:
    assert gateway_options(parse_args([])).bind_address == ":8000"
    args = parse_args(["--proxy-bind-address=127.0.0.1:8010", "--epp-port=9002"])
    assert gateway_options(args).bind_address == "127.0.0.1:8010"
    assert gateway_options(args).activator_address == ":8001"
    assert epp_options(args).host == ""


def test_engine_signals_follow_their_flags_and_interval_0_turns_them_off() -> None:
    catalog = Cluster().catalog()
    defaults = engine_signals(parse_args([]), catalog, CollectorRegistry())
    assert defaults is not None
    assert (defaults.interval, defaults.timeout, defaults.resolve) == (0.25, 1.0, {})
    args = parse_args(["--engine-metrics-interval=2", "--engine-metrics-timeout=0.5", "--resolve=10.0.0.1=127.0.0.1"])
    registry = CollectorRegistry()
    chosen = engine_signals(args, catalog, registry)
    assert chosen is not None
    assert (chosen.interval, chosen.timeout, chosen.resolve) == (2.0, 0.5, {"10.0.0.1": "127.0.0.1"})
    assert registry.get_sample_value("llmaz_gateway_stale_endpoints") == 0.0
    assert engine_signals(parse_args(["--engine-metrics-interval=0"]), catalog, CollectorRegistry()) is None


def test_the_autoscaler_is_on_by_default_with_its_lease_beside_the_gateway_service() -> None:
    options = autoscaler_options(parse_args(["--gateway-service=gw/llmaz-gateway"]))
    assert options is not None
    assert (options.lease_namespace, options.interval, options.scale_to_zero) == ("gw", 2.0, True)
    tuned = autoscaler_options(parse_args(["--autoscaler-interval=5", "--scale-to-zero=false"]))
    assert tuned is not None
    assert (tuned.lease_namespace, tuned.interval, tuned.scale_to_zero) == ("llmaz-system", 5.0, False)
    assert autoscaler_options(parse_args(["--autoscaler=false"])) is None


@pytest.mark.parametrize(
    "flag",
    [
        "--autoscaler-interval=0",
        "--max-request-bytes=0",
        "--max-connections=0",
        "--hold-timeout=0",
        "--body-timeout=-1",
        "--header-timeout=inf",
        "--upstream-retries=10",
        "--resolve=10.0.0.1",
        "--resolve==127.0.0.1",
        "--activator-port=65536",
        "--activator-port=-1",
        "--epp-port=65536",
        "--epp-port=8000",
        "--epp-port=8001",
        "--epp-fallbacks=-1",
        "--epp-fallbacks=10",
        "--gateway-service=llmaz-gateway",
        "--gateway-service=ns/",
        "--engine-metrics-interval=-1",
        "--engine-metrics-interval=inf",
        "--engine-metrics-timeout=0",
        "--routing-strategy=round-robin",
        "--prefix-weight=-1",
        "--queue-weight=many",
        "--utilisation-weight=101",
        "--load-factor=0.5",
        "--load-factor=inf",
        "--flow-control=yes",
        "--flow-engine-waiting=0",
        "--flow-utilisation=0",
        "--flow-utilisation=1.5",
        "--flow-utilisation=most",
        "--flow-endpoint-requests=0",
        "--flow-queue-size=0",
        "--flow-queue-ttl=0",
    ],
)
def test_nonsense_limits_are_refused_at_parse_time(flag: str) -> None:
    with pytest.raises(SystemExit):
        parse_args([flag])


def test_a_missing_api_keys_file_is_one_clear_error_and_exit_code_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "keys"
    assert main(["--api-keys-file", str(missing), "--log-format", "json"]) == 1
    (error,) = error_lines(capsys)
    assert error["event"] == "cannot read the API keys file"
    assert error["path"] == str(missing)


def test_a_missing_kubeconfig_is_one_clear_error_and_exit_code_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope" / "kubeconfig"
    assert main(["--kubeconfig", str(missing), "--log-format", "json"]) == 1
    (error,) = error_lines(capsys)
    assert error["event"] == "cannot load the API server configuration"
    assert "exception" not in error


def test_the_metrics_page_serves_the_runtimes_registry_beside_the_gateways_each_family_once() -> None:
    page = generate_latest(gateway_metrics().registry).decode()
    families = [line.split()[2] for line in page.splitlines() if line.startswith("# TYPE ")]
    for runtime in ("leader_election_master_status", "rest_client_requests_total", "process_cpu_seconds_total"):
        assert runtime in families, runtime
    assert "llmaz_gateway_requests_total" in families
    assert len(families) == len(set(families))


def test_the_heap_is_frozen_after_the_caches_sync_as_in_the_manager() -> None:
    options = manager_options(parse_args(["--drain-timeout=12"]))
    assert options.freeze_heap_after_sync
    assert options.graceful_shutdown_timeout == 17.0
