"""Start the node cluster in the foreground, or clean what a crashed one left.

    python -m llmaz_dev.envtest.node [--dir DIR]    # prints `export KUBECONFIG=...`; Ctrl-C stops and cleans up
    python -m llmaz_dev.envtest.node clean          # tear down leftovers of a run that was killed

The images of `make image-build` that exist are imported into the node's containerd; llmaz itself is not
installed (see docs/e2e.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from llmaz_dev.envtest._assets import repo_crd_paths
from llmaz_dev.envtest._foreground import run_until_signalled
from llmaz_dev.envtest.images import available_images, find_images
from llmaz_dev.envtest.node._host import PrerequisiteError, find_leftovers, teardown
from llmaz_dev.envtest.node._layout import NodeLayout
from llmaz_dev.envtest.node.cluster import NodeCluster


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmaz_dev.envtest.node", description=__doc__)
    parser.add_argument("action", nargs="?", choices=["up", "clean"], default="up")
    parser.add_argument("--dir", type=Path, default=None, help="working directory (default: a temporary one)")
    parser.add_argument(
        "--images", default="", help="comma-separated image names to import (default: every image built; pause always)"
    )
    args = parser.parse_args(argv)
    try:
        if args.action == "clean":
            return _clean()
        return _up(args.dir, [name for name in args.images.split(",") if name])
    except PrerequisiteError as error:
        print(f"node: {error}", file=sys.stderr)
        return 1


def _clean() -> int:
    layout = NodeLayout()
    state = find_leftovers(layout)
    if state is None:
        print("node: nothing to clean", file=sys.stderr)
        return 0
    cleaned = teardown(layout, state)
    print(f"node: cleaned {', '.join(cleaned) or 'nothing'}", file=sys.stderr)
    return 0


def _up(work_dir: Path | None, names: list[str]) -> int:
    images = find_images(["pause", *names]) if names else available_images()
    if "pause" not in images:
        images.update(find_images(["pause"]))
    sandbox = images.pop("pause")
    crds = repo_crd_paths()
    return run_until_signalled(NodeCluster(sandbox_image=sandbox, images=list(images.values()), crd_paths=crds,
                                           work_dir=work_dir))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
