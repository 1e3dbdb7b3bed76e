"""Start a simulated cluster in the foreground: `python -m llmaz_dev.envtest.simulated [--dir DIR] [--state-file F]`.

It prints the `export KUBECONFIG=...` line once every node is Ready, then runs until SIGINT, SIGTERM or SIGHUP and
stops everything. `--state-file` receives the pids and ports of every process (JSON), for tools that check that
nothing outlives the cluster. llmaz itself is not installed: see docs/e2e.md for that.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from llmaz_dev.envtest._assets import repo_crd_paths
from llmaz_dev.envtest._foreground import run_until_signalled
from llmaz_dev.envtest.simulated.cluster import SimulatedCluster


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmaz_dev.envtest.simulated", description=__doc__)
    parser.add_argument("--dir", type=Path, default=None, help="working directory (default: a temporary one)")
    parser.add_argument("--state-file", type=Path, default=None, help="write pids and ports here once started")
    args = parser.parse_args(argv)
    cluster = SimulatedCluster(crd_paths=repo_crd_paths(), work_dir=args.dir)
    return run_until_signalled(cluster, lambda started: _record_state(started, args.state_file))


def _record_state(cluster: SimulatedCluster, state_file: Path | None) -> None:
    if state_file is not None:
        state_file.write_text(json.dumps(cluster.state()))


if __name__ == "__main__":
    sys.exit(main())
