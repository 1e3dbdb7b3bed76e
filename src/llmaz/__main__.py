"""llmaz-manager: the composition root. Flags, logging, client, manager, controllers; nothing imports it.

Startup order is the manager's (probes and servers first, then caches, then leader election and controllers);
see `llmaz.runtime.manager` for why.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from llmaz.controllers.setup import ControllerSettings, setup_controllers
from llmaz.runtime import log
from llmaz.runtime.client import Client
from llmaz.runtime.client.config import load
from llmaz.runtime.manager import Manager, ManagerOptions

LEADER_ELECTION_ID = "fbb36db9.llmaz.io"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="llmaz-manager", description="Run the llmaz controllers and webhooks.")
    parser.add_argument("--metrics-bind-address", default=":8443", help="metrics endpoint address (default :8443)")
    parser.add_argument(
        "--health-probe-bind-address", default=":8081", help="/healthz and /readyz address (default :8081)"
    )
    parser.add_argument("--webhook-port", type=int, default=9443, help="admission webhook port (default 9443)")
    parser.add_argument("--namespace", default="llmaz-system", help="namespace of the manager, its Secret and Lease")
    parser.add_argument("--leader-elect", action="store_true", help="run controllers only while holding the Lease")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: in-cluster or $KUBECONFIG)")
    parser.add_argument("--max-concurrent-reconciles", type=int, default=1, help="workers per controller (default 1)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", default="auto", choices=["auto", "json", "console"])
    return parser.parse_args(argv)


def webhooks_enabled() -> bool:
    return os.environ.get("ENABLE_WEBHOOKS", "true").lower() != "false"


async def run(args: argparse.Namespace) -> None:
    client = Client(await load(args.kubeconfig))
    try:
        manager = Manager(
            client,
            ManagerOptions(
                health_probe_bind_address=args.health_probe_bind_address,
                leader_election=args.leader_elect,
                leader_election_id=LEADER_ELECTION_ID,
                leader_election_namespace=args.namespace,
            ),
        )
        setup_controllers(
            manager,
            ControllerSettings(namespace=args.namespace, max_concurrent_reconciles=args.max_concurrent_reconciles),
        )
        await manager.start()
    finally:
        await client.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    log.configure(args.log_level, args.log_format)
    logger = log.get_logger("llmaz.manager")
    logger.info("starting manager", webhooks=webhooks_enabled(), namespace=args.namespace)
    try:
        asyncio.run(run(args))
    except Exception as err:
        logger.error("manager exited", error=str(err), exc_info=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
