"""Start a simulated cluster in the foreground: `python -m llmaz.envtest.simulated [--dir DIR] [--state-file F]`.

It prints the `export KUBECONFIG=...` line once every node is Ready, then runs until SIGINT, SIGTERM or SIGHUP and
stops everything. `--state-file` receives the pids and ports of every process (JSON), for tools that check that
nothing outlives the cluster. llmaz itself is not installed: see docs/e2e.md for that.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from llmaz.envtest._assets import source_root
from llmaz.envtest.simulated.cluster import SimulatedCluster


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmaz.envtest.simulated", description=__doc__)
    parser.add_argument("--dir", type=Path, default=None, help="working directory (default: a temporary one)")
    parser.add_argument("--state-file", type=Path, default=None, help="write pids and ports here once started")
    args = parser.parse_args(argv)
    stopping = threading.Event()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    root = source_root()
    crds = [root / "config" / "crd" / "bases"] if root and (root / "config" / "crd" / "bases").is_dir() else []
    with SimulatedCluster(crd_paths=crds, work_dir=args.dir) as cluster:
        if args.state_file is not None:
            args.state_file.write_text(json.dumps(cluster.state()))
        print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
        while not stopping.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
