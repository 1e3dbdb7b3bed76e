"""`python -m llmaz_dev.chartgen --kustomize KUSTOMIZE [--repo REPO] CHART_DIR`: the Helm chart (`make chart`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from llmaz_dev.chartgen.chart import render_chart, write_chart
from llmaz_dev.chartgen.sources import SourceError, read_sources


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmaz_dev.chartgen", description=__doc__)
    parser.add_argument("--kustomize", type=Path, required=True, help="the kustomize binary (make kustomize)")
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="the source checkout (default: here)")
    parser.add_argument("chart_dir", type=Path, help="where the chart goes (chart/)")
    args = parser.parse_args(argv)
    try:
        files = render_chart(read_sources(args.kustomize, args.repo))
    except SourceError as error:
        print(f"chartgen: {error}", file=sys.stderr)
        return 1
    written = write_chart(args.chart_dir, files)
    print(f"chartgen: wrote {len(written)} files to {args.chart_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
