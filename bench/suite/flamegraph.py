"""A flame graph (PNG) from py-spy's raw output: collapsed stacks, one per line, `frame;frame;... count`.

Each frame is a bar as wide as its share of the samples, callers below their callees; frames narrower than
0.2 % are not drawn. The label is the function and its file, py-spy's `name (path:line)` without the line.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

MIN_SHARE = 0.002
_LINE_NUMBER = re.compile(r":\d+\)$")


@dataclass
class Frame:
    samples: int = 0
    children: dict[str, Frame] = field(default_factory=dict)


def parse(text: str) -> Frame:
    root = Frame()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        node = root
        node.samples += int(count)
        # The first two frames are py-spy's process and thread: the same for every sample of a one-thread loop.
        for name in stack.split(";")[2:]:
            node = node.children.setdefault(_LINE_NUMBER.sub(")", name), Frame())
            node.samples += int(count)
    return root


def _short(name: str) -> str:
    function, _, where = name.partition(" (")
    path = where.rstrip(")")
    return f"{function} ({'/'.join(path.split('/')[-2:])})" if path else function


def render(profile: Path, out: Path, title: str) -> Path | None:
    root = parse(profile.read_text())
    if not root.samples:
        return None
    bars: list[tuple[float, float, int, str]] = []

    def walk(node: Frame, left: float, depth: int) -> None:
        for name, child in sorted(node.children.items()):
            width = child.samples / root.samples
            if width >= MIN_SHARE:
                bars.append((left, width, depth, name))
                walk(child, left, depth + 1)
            left += width

    walk(root, 0.0, 0)
    depth = max(d for _, _, d, _ in bars) + 1 if bars else 1
    fig, ax = plt.subplots(figsize=(18, max(4.0, 0.22 * depth + 1)))
    colors = plt.get_cmap("YlOrRd")
    for left, width, level, name in bars:
        ax.barh(level, width, left=left, height=0.95, color=colors(0.25 + 0.5 * (zlib.crc32(name.encode()) % 97) / 97),
                edgecolor="white", linewidth=0.3)  # fmt: skip
        if width > 0.04:
            label = f"{_short(name)} {100 * width:.1f}%"
            ax.text(left + 0.002, level, label[: int(width * 190)], va="center", fontsize=6)
    ax.set(xlim=(0, 1), ylim=(-0.5, depth - 0.5), yticks=[], xlabel="share of samples")
    ax.set_title(f"{title} ({root.samples} samples)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
