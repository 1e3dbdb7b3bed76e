"""The benchmark's modules, importable here as bench/run.py imports them: its `suite` package from bench/."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
