"""`python -m llmaz_dev.envtest up|down`: the background control plane of `make dev-up` / `make dev-down`."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from llmaz_dev.envtest._devcluster import dev_down, dev_up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmaz_dev.envtest", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start (or reuse) the control plane and apply CRDs and manifests")
    up.add_argument("--dir", type=Path, default=Path(".dev"), help="state directory (default .dev)")
    up.add_argument("--crd-path", type=Path, action="append", default=[], help="CRD file or directory")
    up.add_argument("--manifests", type=Path, help="kustomize directory applied after the CRDs")
    up.add_argument("--kustomize", type=Path, help="kustomize binary used for --manifests")
    down = commands.add_parser("down", help="stop the control plane started by `up` and remove its state")
    down.add_argument("--dir", type=Path, default=Path(".dev"), help="state directory (default .dev)")
    args = parser.parse_args(argv)
    # Ctrl-C interrupts either command (`up` then stops what it started) also where SIGINT was inherited ignored,
    # as a background job of a non-interactive shell or `nohup` starts.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _run(args)
    except KeyboardInterrupt:
        print(f"python -m llmaz_dev.envtest {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        if inherited is not None:  # None: set outside Python, which cannot put it back
            signal.signal(signal.SIGINT, inherited)


def _run(args: argparse.Namespace) -> int:
    if args.command == "up":
        crd_paths = [path for path in args.crd_path if path.exists()]
        kubeconfig = dev_up(args.dir.resolve(), crd_paths, args.manifests, args.kustomize)
        print(f"export KUBECONFIG={kubeconfig}")
        return 0
    stopped = dev_down(args.dir.resolve())
    print(f"stopped: {', '.join(stopped)}" if stopped else "no dev control plane was running", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
