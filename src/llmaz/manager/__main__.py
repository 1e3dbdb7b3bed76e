"""llmaz-manager: the composition root. Flags, logging, client, manager, controllers, webhooks and metrics.

Nothing imports this module but `llmaz_dev.rbacgen`, for the rules of the informers it adds. Startup order is the
manager's (probes and servers first, then caches, then leader election and controllers; see
`llmaz.runtime.manager` for why). Readiness waits for the caches and, when webhooks are on, for the webhook server
to serve a certificate whose CA is injected into both webhook configurations (llmaz reported ready before its
webhooks could answer).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from llmaz.apis import resources as r
from llmaz.apis.duration import parse_duration
from llmaz.controllers.setup import ControllerSettings, setup_controllers
from llmaz.manager import startguard
from llmaz.runtime import flags, tracing
from llmaz.runtime.client import Client
from llmaz.runtime.client.config import RestConfig, load
from llmaz.runtime.entrypoint import add_process_flags, exit_status, run_manager, start_logging
from llmaz.runtime.leaderelection import check_timings
from llmaz.runtime.manager import Manager, ManagerOptions
from llmaz.runtime.rbac import allow
from llmaz.runtime.server.authn import DelegatingAuth
from llmaz.runtime.server.metrics_server import DEFAULT_CERT_DIR as METRICS_CERT_DIR
from llmaz.runtime.server.metrics_server import MetricsServer
from llmaz.runtime.webhook.server import DEFAULT_CERT_DIR as WEBHOOK_CERT_DIR
from llmaz.runtime.webhook.server import Limits, WebhookServer
from llmaz.schedext.server import SchedulerExtender
from llmaz.webhooks import webhooks
from llmaz.webhooks.cachelookup import CacheLookup

LEADER_ELECTION_ID = "fbb36db9.llmaz.io"
# The scheduler extender's Node informer (`add_scheduler_extender`).
RBAC_RULES = (allow(r.NODES, "list", "watch"),)


# Seconds from a Go duration ("15s", "1m30s", "500ms", as controller-runtime's flags take) or a number.
duration = flags.parsed_by(parse_duration)
bind_address = flags.bind_address


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="llmaz-manager", description="Run the llmaz controllers and webhooks.")
    add = parser.add_argument
    add(
        "--metrics-bind-address",
        type=bind_address,
        default=":8443",
        help="metrics endpoint address, e.g. :8443 (every interface, IPv4 and IPv6), [::1]:8443; 0 disables it",
    )
    add("--metrics-secure", default="true", choices=["true", "false"], help="HTTPS + token auth for /metrics")
    add("--metrics-cert-dir", type=Path, default=None, help="tls.crt/tls.key for /metrics (default: self-signed)")
    add(
        "--health-probe-bind-address",
        type=bind_address,
        default=":8081",
        help="/healthz and /readyz address (default :8081: every interface, IPv4 and IPv6)",
    )
    add("--webhook-port", type=int, default=9443, help="admission webhook port (default 9443)")
    add(
        "--webhook-bind-host",
        default="",
        help="admission webhook listen host, e.g. 127.0.0.1, ::1 (default: every interface, IPv4 and IPv6)",
    )
    limits = Limits()
    add(
        "--webhook-max-in-flight-requests",
        type=int,
        default=limits.max_requests,
        help=f"admission requests read or judged at once; more get 429 (default {limits.max_requests})",
    )
    add(
        "--webhook-max-in-flight-bytes",
        type=int,
        default=limits.max_bytes,
        help=f"admission request body bytes held at once; more get 429 (default {limits.max_bytes})",
    )
    add(
        "--webhook-read-timeout",
        type=duration,
        default=limits.read_timeout,
        help="time for a webhook TLS handshake, then a request's headers, then its body (default 10s)",
    )
    add("--cert-dir", type=Path, default=None, help="externally managed webhook tls.crt/tls.key (turns rotation off)")
    add("--webhook-cert-ip-addresses", default="", help="extra IP SANs of the self-managed webhook certificate")
    add("--webhook-cert-dir", type=Path, default=WEBHOOK_CERT_DIR, help="where the self-managed certificate is written")
    add("--namespace", default="llmaz-system", help="namespace of the manager, its Secret, Lease and ConfigMap")
    add("--leader-elect", action="store_true", help="run controllers only while holding the Lease")
    add("--leader-elect-lease-duration", type=duration, default=15.0, help="how long a Lease binds (default 15s)")
    add(
        "--leader-elect-renew-deadline",
        type=duration,
        default=10.0,
        help="how long the leader may fail to renew before it stops leading (default 10s)",
    )
    add("--leader-elect-retry-period", type=duration, default=2.0, help="wait between Lease attempts (default 2s)")
    add(
        "--kube-api-qps",
        type=float,
        default=50.0,
        help="API requests per second, per resource; 0 disables (default 50)",
    )
    add("--kube-api-burst", type=int, default=100, help="API request burst, per resource (default 100)")
    add("--max-concurrent-reconciles", type=int, default=1, help="workers per controller (default 1)")
    add(
        "--reconcile-timeout",
        type=duration,
        default=60.0,
        help="how long one reconcile may take before it is cancelled and retried; 0 disables (default 60s)",
    )
    add(
        "--scheduler-extender-bind-address",
        type=bind_address,
        default="0",
        help="kube-scheduler extender (filter, prioritize by inference flavor) address, e.g. :9444; 0 (default) off",
    )
    add(
        "--allow-other-manager",
        action="store_true",
        default=startguard.allowed_by_env(),
        help=f"start beside another llmaz manager (e.g. Go llmaz) in the namespace; also {startguard.ALLOW_ENV}=true",
    )
    tracing.add_tracing_flags(parser)
    add_process_flags(parser)
    args = parser.parse_args(argv)
    try:
        check_timings(
            args.leader_elect_lease_duration, args.leader_elect_renew_deadline, args.leader_elect_retry_period
        )
    except ValueError as err:
        parser.error(f"--leader-elect-*: {err}")
    if args.kube_api_qps > 0 and args.kube_api_burst < 1:
        parser.error("--kube-api-burst must be at least 1 when --kube-api-qps is positive")
    try:
        args.webhook_limits = Limits(
            args.webhook_max_in_flight_requests, args.webhook_max_in_flight_bytes, args.webhook_read_timeout
        )
    except ValueError as err:
        parser.error(f"--webhook-*: {err}")
    if args.reconcile_timeout < 0:
        parser.error("--reconcile-timeout must not be negative")
    return args


def webhooks_enabled() -> bool:
    return os.environ.get("ENABLE_WEBHOOKS", "true").lower() != "false"


def add_webhooks(manager: Manager, args: argparse.Namespace) -> None:
    informers = manager.informers
    lookup = CacheLookup(
        informers.informer_for(r.OPEN_MODELS).store,
        informers.informer_for(r.BACKEND_RUNTIMES).store,
        informers.has_synced,
    )
    cert_dir = args.cert_dir or args.webhook_cert_dir
    server = WebhookServer(
        webhooks(lookup),
        host=args.webhook_bind_host,
        port=args.webhook_port,
        cert_dir=cert_dir,
        limits=args.webhook_limits,
    )
    manager.add(server)
    if args.cert_dir is not None:
        manager.add_readyz_check("webhook", server.started)
        return
    # Imported here, as in add_metrics: cryptography's native core adds ~8 MB of RSS to a manager that makes no
    # certificate.
    from llmaz.certs import CertRotator, RotatorOptions

    ips = tuple(ip for ip in args.webhook_cert_ip_addresses.split(",") if ip)
    rotator = CertRotator(
        manager.client,
        RotatorOptions(namespace=args.namespace, cert_dir=cert_dir, ip_addresses=ips),
        on_files_written=server.certs.reload,
    )
    manager.add(rotator)
    manager.add_readyz_check("webhook", lambda: server.started() and rotator.ready())


def add_scheduler_extender(manager: Manager, args: argparse.Namespace) -> None:
    if args.scheduler_extender_bind_address == "0":
        return
    informers = manager.informers
    extender = SchedulerExtender(
        args.scheduler_extender_bind_address,
        informers.informer_for(r.OPEN_MODELS).store,
        informers.informer_for(r.NODES).store,
        informers.has_synced,
    )
    manager.add(extender)
    manager.add_readyz_check("scheduler-extender", extender.started)


def add_metrics(manager: Manager, args: argparse.Namespace) -> None:
    if args.metrics_bind_address == "0":
        return
    secure = args.metrics_secure == "true"
    cert_dir = args.metrics_cert_dir or METRICS_CERT_DIR
    if secure and args.metrics_cert_dir is None:
        from llmaz.certs import ensure_self_signed

        ensure_self_signed(cert_dir, dns_names=[socket.gethostname(), "localhost"], ip_addresses=["127.0.0.1", "::1"])
    auth = DelegatingAuth(manager.client) if secure else None
    server = MetricsServer(args.metrics_bind_address, auth=auth, cert_dir=cert_dir, secure=secure)
    manager.add(server)
    # Ready only once scrapes are answered: the Service sends them to any ready replica.
    manager.add_readyz_check("metrics", server.started)


def manager_options(args: argparse.Namespace) -> ManagerOptions:
    return ManagerOptions(
        health_probe_bind_address=args.health_probe_bind_address,
        leader_election=args.leader_elect,
        leader_election_id=LEADER_ELECTION_ID,
        leader_election_namespace=args.namespace,
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
        # The controllers have stopped before the Lease is released, so a successor (a rolling update's new
        # replica) takes over at once instead of after the lease duration.
        leader_election_release_on_cancel=True,
        freeze_heap_after_sync=True,
    )


def controller_settings(args: argparse.Namespace) -> ControllerSettings:
    return ControllerSettings(
        namespace=args.namespace,
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        reconcile_timeout=args.reconcile_timeout,
    )


async def rest_config(args: argparse.Namespace) -> RestConfig:
    config = await load(args.kubeconfig)
    config.qps, config.burst = args.kube_api_qps, args.kube_api_burst
    return config


def add_runnables(manager: Manager, args: argparse.Namespace) -> None:
    setup_controllers(manager, controller_settings(args))
    if webhooks_enabled():
        add_webhooks(manager, args)
    add_scheduler_extender(manager, args)
    add_metrics(manager, args)


async def guard_start(client: Client, args: argparse.Namespace) -> None:
    """Refuse to start beside another llmaz manager (`llmaz.manager.startguard`)."""
    await startguard.check(
        client,
        args.namespace,
        LEADER_ELECTION_ID,
        hostname=socket.gethostname(),
        allow_other_manager=args.allow_other_manager,
    )


async def run(args: argparse.Namespace) -> None:
    await run_manager(
        await rest_config(args),
        manager_options(args),
        lambda manager: add_runnables(manager, args),
        preflight=lambda client: guard_start(client, args),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logger = start_logging(args, "llmaz.manager")
    try:
        traced = tracing.start_from(args, "llmaz-manager")
    except ValueError as err:
        logger.error("cannot start tracing", error=str(err))
        return 2
    logger.info("starting manager", webhooks=webhooks_enabled(), namespace=args.namespace, tracing=traced)
    try:
        return exit_status(run(args), logger, "manager")
    finally:
        tracing.shutdown()


if __name__ == "__main__":
    sys.exit(main())
