"""`python -m llmaz_dev.crdgen OUT_DIR`: write the four CRDs into OUT_DIR."""

from __future__ import annotations

import sys
from pathlib import Path

from llmaz_dev.crdgen.crds import write


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m llmaz_dev.crdgen OUT_DIR", file=sys.stderr)
        return 2
    for path in write(Path(argv[0])):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
