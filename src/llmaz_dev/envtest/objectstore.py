"""A local S3-compatible object store (moto's server mode) and the tiny model it serves to the node tier.

Invariants:
- The server listens where it is told (the node's bridge address, so pods reach it) and nowhere else; it is a
  `ManagedProcess`, stopped with its owner like every other test component.
- moto accepts any access key: the credentials the pods get from their Secret are real in form, not checked.
- The tiny model (`llmaz_dev.tinymodel`: random weights, meaningless text) is generated once into the cache
  from the vocabulary shipped beside the llama-server binary; the same inputs always give the same bytes. So is its
  random LoRA adapter (`tiny_lora`), which needs no vocabulary.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from llmaz_dev.envtest._assets import AssetsMissingError, cache_root, source_root
from llmaz_dev.envtest._process import ManagedProcess

ACCESS_KEY_ID = "llmaz-local"
SECRET_ACCESS_KEY = "llmaz-local-secret"
REGION = "us-east-1"
_START_TIMEOUT = 30.0


class ObjectStore:
    """moto's S3 server on `host:port`; `upload` puts files into buckets it creates on demand."""

    def __init__(self, host: str, port: int, log_path: Path) -> None:
        self.host = host
        self.port = port
        self._process = ManagedProcess("object-store", self._argv(), log_path)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> ObjectStore:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self) -> ObjectStore:
        self._process.start()
        deadline = time.monotonic() + _START_TIMEOUT
        while not self._accepts():
            if self._process.exit_code() is not None or time.monotonic() > deadline:
                self._process.stop()
                raise RuntimeError(f"the object store did not start on {self.url}:\n{self._process.log_tail()}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        self._process.stop()

    def client(self) -> Any:
        """A boto3 S3 client for this server (boto3 comes with the `loader` extra)."""
        import boto3  # type: ignore[import-untyped]

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        )

    def upload(self, bucket: str, key: str, path: Path) -> str:
        """Put `path` at `s3://bucket/key`, creating the bucket if needed; return that URI."""
        client = self.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if bucket not in existing:
            client.create_bucket(Bucket=bucket)
        client.upload_file(str(path), bucket, key)
        return f"s3://{bucket}/{key}"

    def delete(self, bucket: str, key: str) -> None:
        self.client().delete_object(Bucket=bucket, Key=key)

    def _argv(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]

    def _accepts(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(1.0)
            return sock.connect_ex((self.host, self.port)) == 0


def tiny_model(shape: str = "tiny") -> Path:
    """A random-weight llama GGUF of `shape` (`llmaz_dev.tinymodel.SHAPES`), generated into the cache on first
    use: `tiny-llama.gguf` for the tiny demo model, `<shape>-llama.gguf` for the others."""
    from llmaz_dev.tinymodel import SHAPES, write_tiny_model

    vocab = _llama_server_dir() / "vocab-llama-spm.gguf"
    if not vocab.is_file():
        raise AssetsMissingError(f"{vocab} not found: run `make llama-server` (hack/llamacpp/build.sh)")
    out = cache_root() / "models" / f"{shape}-llama.gguf"
    if not out.is_file():
        write_tiny_model(vocab, out, SHAPES[shape])
    return out


def tiny_lora(shape: str = "tiny") -> Path:
    """A random LoRA adapter for the model of `shape` (`llmaz_dev.tinymodel.write_tiny_lora`), generated into
    the cache on first use as `<shape>-llama-lora.gguf` (the tiny model's: `tiny-llama-lora.gguf`)."""
    from llmaz_dev.tinymodel import SHAPES, write_tiny_lora

    out = cache_root() / "models" / f"{shape}-llama-lora.gguf"
    if not out.is_file():
        write_tiny_lora(SHAPES[shape], out)
    return out


def _llama_server_dir() -> Path:
    root = source_root()
    if root is None:
        raise AssetsMissingError("hack/llamacpp not found (not a source checkout): run `make llama-server`")
    # The build script alone knows how its output directory is keyed (the llama.cpp version and its build revision).
    printed = subprocess.run(
        [str(root / "hack" / "llamacpp" / "build.sh"), "--print"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "LLMAZ_CACHE": str(cache_root())},
    )
    return Path(printed.stdout.strip().splitlines()[-1]).parent
