"""`python -m llmaz_dev.crdgen OUT_DIR`: write llmaz's four CRDs into OUT_DIR.
`python -m llmaz_dev.crdgen --gie OUT_DIR`: write the Gateway API Inference Extension's InferencePool CRD into it."""

from __future__ import annotations

import sys
from pathlib import Path

from llmaz_dev.crdgen.crds import CRDS, GIE_CRDS, write

_USAGE = "usage: python -m llmaz_dev.crdgen [--gie] OUT_DIR"


def main(argv: list[str]) -> int:
    specs = CRDS
    if argv[:1] == ["--gie"]:
        specs, argv = GIE_CRDS, argv[1:]
    if len(argv) != 1:
        print(_USAGE, file=sys.stderr)
        return 2
    for path in write(Path(argv[0]), specs):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
