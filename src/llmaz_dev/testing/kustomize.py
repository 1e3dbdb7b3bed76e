"""`config/default` built with one of its optional components switched on, as a user's overlay would."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from llmaz_dev.envtest._assets import tool_path

REPO = Path(__file__).resolve().parents[3]


def default_with_component(workdir: Path, component: str, commented: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> object of `kustomize build config/default` (a copy of `config/` under `workdir`) whose
    commented line `# components: [../<commented>]` is replaced by `components: [../<component>]`."""
    config = workdir / "config"
    shutil.copytree(REPO / "config", config)
    default = config / "default" / "kustomization.yaml"
    text = default.read_text()
    line = f"# components: [../{commented}]\n"
    assert line in text, f"config/default/kustomization.yaml has no line {line!r}"
    default.write_text(text.replace(line, f"components: [../{component}]\n"))
    built = subprocess.run(
        [str(tool_path("kustomize")), "build", str(config / "default")], capture_output=True, text=True, check=True
    ).stdout
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in yaml.safe_load_all(built) if doc}
