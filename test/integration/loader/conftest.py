"""Fixtures for the loader against local protocol servers: a Hub API server, an OSS server, moto for S3/GCS.

`run_loader` runs `python -m llmaz.loader` as a subprocess, exactly as the init container does, with an environment
made only of what the test passes (plus PATH), and returns its exit code and parsed JSON log lines.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from moto.server import ThreadedMotoServer

from llmaz_dev.testing.storage import HubRepo, HubServer, OssServer
from llmaz_dev.testing.waiting import eventually_sync

FAST_RETRIES = {"LOADER_RETRY_BASE_SECONDS": "0.05", "LOADER_RETRY_MAX_SECONDS": "0.2", "LOADER_MAX_ATTEMPTS": "3"}
AWS_TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@dataclass
class LoaderRun:
    code: int
    events: list[dict[str, Any]]
    stderr: str

    def event(self, name: str) -> dict[str, Any]:
        found = [e for e in self.events if e.get("event") == name]
        assert found, f"no {name} event in:\n{self.stderr}"
        return found[-1]


def loader_env(model_dir: Path, **env: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(model_dir.parent),
        "MODEL_DIR": str(model_dir),
        "LOADER_PROGRESS_INTERVAL_SECONDS": "0.2",
        **FAST_RETRIES,
        **env,
    }


def start_loader(env: Mapping[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "llmaz.loader"], env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(process: subprocess.Popen[str], timeout: float = 120) -> LoaderRun:
    _, stderr = process.communicate(timeout=timeout)
    events = []
    for line in stderr.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return LoaderRun(process.returncode, events, stderr)


def run_loader(env: Mapping[str, str], timeout: float = 120) -> LoaderRun:
    return finish(start_loader(env), timeout)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return tmp_path / "models"


@pytest.fixture
def hub() -> Iterator[HubServer]:
    server = HubServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def oss() -> Iterator[OssServer]:
    server = OssServer(access_key_id="oss-key")
    server.start()
    yield server
    server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="session")
def moto_with_auth_url() -> Iterator[str]:
    """A moto server that checks access keys (none are registered, so every request is refused)."""
    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        eventually_sync(lambda: _accepts(port), what="the moto server to accept connections")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def s3(moto_url: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def sample_repo() -> HubRepo:
    return HubRepo(
        revisions={
            "main": {
                "config.json": b'{"model_type": "opt"}',
                "model.safetensors": bytes(range(256)) * 2048,
                "tokenizer/vocab.txt": b"a\nb\nc\n",
                "tokenizer/nested/merges.txt": b"a b\n",
                "README.md": b"# opt\n",
                "q4.gguf": b"GGUF" + b"\x01" * 10_000,
            },
            "v2": {"config.json": b'{"model_type": "opt", "v": 2}', "model.safetensors": b"\x02" * 4096},
        }
    )
