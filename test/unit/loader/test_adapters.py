"""An adapter's loader: the same sources as a model's, its own place on the volume, and failures naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmaz.loader.__main__ import run
from llmaz.loader.config import read_config
from llmaz.loader.errors import ExitCode

S3_FILE = {
    "MODEL_SOURCE_TYPE": "objstore",
    "PROVIDER": "S3",
    "BUCKET": "loras",
    "MODEL_PATH": "sql/sql-lora.gguf",
    "ADAPTER_NAME": "sql",
}


@pytest.mark.parametrize(
    ("env", "model_path", "local_dir", "single_file"),
    [
        (S3_FILE, "/m/adapters--sql/sql-lora.gguf", "/m/adapters--sql", True),
        ({**S3_FILE, "MODEL_PATH": "sql/"}, "/m/adapters--sql", "/m/adapters--sql", False),
        (
            {"MODEL_SOURCE_TYPE": "modelhub", "MODEL_ID": "org/lora", "MODEL_FILENAME": "l.gguf", "ADAPTER_NAME": "a"},
            "/m/adapters--a/l.gguf",
            "/m/adapters--a",
            True,
        ),
        (
            {"MODEL_SOURCE_TYPE": "modelhub", "MODEL_ID": "org/lora", "ADAPTER_NAME": "a"},
            "/m/adapters--a",
            "/m/adapters--a",
            False,
        ),
    ],
    ids=["object", "directory", "hub-file", "hub-repository"],
)
def test_an_adapter_lands_in_its_own_directory_below_the_model_root(
    env: dict[str, str], model_path: str, local_dir: str, single_file: bool
) -> None:
    target = read_config({**env, "MODEL_DIR": "/m/"}).target

    assert (target.model_path, target.local_dir, target.single_file) == (Path(model_path), Path(local_dir), single_file)


def test_a_failing_adapter_loader_names_the_adapter_in_its_termination_message(tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    termination.touch()
    env = {**S3_FILE, "BUCKET": "", "LOADER_TERMINATION_LOG": str(termination)}

    assert run(env) == ExitCode.BAD_CONFIGURATION
    assert termination.read_text().startswith("adapter sql: BadConfiguration: environment variable BUCKET is not set")


def test_a_models_loader_says_nothing_of_adapters(tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    termination.touch()
    env = {key: value for key, value in S3_FILE.items() if key != "ADAPTER_NAME"}

    assert run({**env, "BUCKET": "", "LOADER_TERMINATION_LOG": str(termination)}) == ExitCode.BAD_CONFIGURATION
    assert termination.read_text().startswith("BadConfiguration: environment variable BUCKET is not set")
