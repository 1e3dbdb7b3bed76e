"""A foreground cluster is held until a stop signal, and stopped; a signal during its start lets the start finish."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.signals

CLUSTER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from llmaz_dev.envtest._foreground import run_until_signalled

    class Cluster:
        kubeconfig = Path("/tmp/kubeconfig")

        def __enter__(self):
            print("starting", flush=True)
            if sys.argv[1] == "during-start":
                os.kill(os.getpid(), signal.SIGTERM)  # handled once the start is done
            print("started", flush=True)
            return self

        def __exit__(self, *_):
            print("stopped", flush=True)

    sys.exit(run_until_signalled(Cluster(), lambda cluster: print("ready", flush=True)))
    """
)


def run(when: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CLUSTER, when], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_ends_the_hold_and_stops_the_cluster(signum: signal.Signals) -> None:
    cluster = run("held")
    assert cluster.stdout is not None
    lines: list[str] = []
    for line in cluster.stdout:  # up to the kubeconfig line: the cluster is held from then on
        lines.append(line.strip())
        if line.startswith("export"):
            break
    assert cluster.poll() is None
    cluster.send_signal(signum)
    output, _ = cluster.communicate(timeout=30)
    assert cluster.returncode == 0
    assert [*lines, *output.split()] == ["starting", "started", "ready", "export KUBECONFIG=/tmp/kubeconfig", "stopped"]


def test_a_stop_signal_during_the_start_lets_it_finish_then_stops_at_once() -> None:
    output, _ = run("during-start").communicate(timeout=30)
    assert output.splitlines() == ["starting", "started", "ready", "export KUBECONFIG=/tmp/kubeconfig", "stopped"]
