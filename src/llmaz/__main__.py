"""Composition root of the llmaz manager: flags now, controllers and webhooks as they land."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="llmaz-manager", description="Run the llmaz controllers and webhooks."
    )
    parser.add_argument(
        "--metrics-bind-address", default=":8443", help="metrics endpoint address (default :8443)"
    )
    parser.add_argument(
        "--health-probe-bind-address", default=":8081", help="/healthz and /readyz address (default :8081)"
    )
    parser.add_argument(
        "--webhook-port", type=int, default=9443, help="admission webhook port (default 9443)"
    )
    parser.add_argument(
        "--namespace", default="llmaz-system", help="namespace of the manager, its Secret and Lease"
    )
    parser.add_argument(
        "--leader-elect", action="store_true", help="run controllers only while holding the Lease"
    )
    parser.add_argument(
        "--kubeconfig", default=None, help="kubeconfig path (default: in-cluster or $KUBECONFIG)"
    )
    parser.add_argument(
        "--max-concurrent-reconciles", type=int, default=1, help="workers per controller (default 1)"
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", default="auto", choices=["auto", "json", "console"])
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    parse_args(argv)
    print("llmaz-manager: the controllers are not wired in yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
