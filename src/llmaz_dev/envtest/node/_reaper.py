"""The node's reaper: a detached process that tears the node down if the process that started it dies.

kubelet and containerd die with their parent (PR_SET_PDEATHSIG), but containerd's shims and the containers
they run do not, nor do the bridge, mounts, cgroups and nft tables. The reaper waits on its owner's pidfd; when
the owner is gone it runs the same `teardown` a normal stop runs, if the node's record still names that owner.
A SIGTERM (the owner's normal stop) ends it without touching anything.

    python -m llmaz_dev.envtest.node._reaper <owner pid> <node root>
"""

from __future__ import annotations

import os
import select
import signal
import sys
from pathlib import Path

from llmaz_dev.envtest.node._host import HostState, teardown
from llmaz_dev.envtest.node._layout import NodeLayout


def main(argv: list[str]) -> int:
    owner, root = int(argv[0]), Path(argv[1])
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    try:
        pidfd = os.pidfd_open(owner)
    except ProcessLookupError:
        pidfd = None
    if pidfd is not None:
        select.select([pidfd], [], [])  # readable once the owner has exited
    layout = NodeLayout(root=root)
    state = HostState.load(layout.state_file)
    if state is None or state.owner_pid != owner:
        return 0
    cleaned = teardown(layout, state)
    print(f"owner {owner} exited; cleaned: {', '.join(cleaned) or 'nothing'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
