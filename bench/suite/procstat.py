"""CPU seconds and resident memory of a process, read from /proc (Linux only).

CPU is user + system time of the process itself (all its threads); children are not included, which is what
we want: every subject is a single process. Peak RSS is the kernel's high-water mark (VmHWM).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Usage:
    cpu_seconds: float
    rss_bytes: int
    peak_rss_bytes: int


def usage(pid: int) -> Usage:
    """The process's CPU time so far, current RSS and peak RSS. Raises OSError once the process is gone."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # The command name (field 2) may contain spaces; fields after its closing parenthesis are fixed.
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / _TICKS
    status = _status_kb(pid)
    return Usage(cpu, status.get("VmRSS", 0) * 1024, status.get("VmHWM", 0) * 1024)


def _status_kb(pid: int) -> dict[str, int]:
    values: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
    return values


def cpu_of(pids: list[int]) -> float:
    """Summed CPU seconds of several processes (e.g. kube-apiserver and etcd); vanished ones count 0."""
    total = 0.0
    for pid in pids:
        try:
            total += usage(pid).cpu_seconds
        except OSError:
            continue
    return total
