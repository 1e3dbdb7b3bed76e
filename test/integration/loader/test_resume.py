"""A loader killed half-way through a file resumes it with a Range request when restarted, for every protocol."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmaz_dev.testing.storage import HubRepo, HubServer, OssServer, ThrottlingProxy
from llmaz_dev.testing.waiting import eventually_sync

from .conftest import AWS_TEST_CREDENTIALS, finish, loader_env, run_loader, start_loader

BIG = bytes(range(251)) * 12_000  # ~3 MB, not a multiple of any chunk size
SLOW = 400_000  # bytes per second while the first run is killed


@dataclass
class Protocol:
    env: dict[str, str]
    file: Path  # where the big file lands, relative to the models root
    set_rate: Callable[[int | None], None]
    ranges: Callable[[], list[str]]


def _hub(model_dir: Path) -> Iterator[Protocol]:
    hub = HubServer().start()
    assert isinstance(hub, HubServer)
    hub.repos["org/big"] = HubRepo(revisions={"main": {"config.json": b"{}", "model.safetensors": BIG}})
    env = loader_env(model_dir, MODEL_SOURCE_TYPE="modelhub", HF_ENDPOINT=hub.url, MODEL_ID="org/big", REVISION="main")
    yield Protocol(
        env, Path("models--org--big/model.safetensors"), lambda r: setattr(hub, "rate", r), hub.ranges_requested
    )
    hub.stop()


def _oss(model_dir: Path) -> Iterator[Protocol]:
    oss = OssServer().start()
    assert isinstance(oss, OssServer)
    oss.buckets["models"] = {"big/model.safetensors": BIG, "big/config.json": b"{}"}
    env = loader_env(
        model_dir, MODEL_SOURCE_TYPE="objstore", PROVIDER="OSS", ENDPOINT=oss.url, BUCKET="models", MODEL_PATH="big"
    )
    yield Protocol(env, Path("models--big/model.safetensors"), lambda r: setattr(oss, "rate", r), oss.ranges_requested)
    oss.stop()


def _s3(model_dir: Path, s3: Any, moto_url: str) -> Iterator[Protocol]:
    s3.create_bucket(Bucket="resume")
    s3.put_object(Bucket="resume", Key="big/model.safetensors", Body=BIG)
    s3.put_object(Bucket="resume", Key="big/config.json", Body=b"{}")
    proxy = ThrottlingProxy(int(moto_url.rsplit(":", 1)[1])).start()
    env = loader_env(
        model_dir,
        MODEL_SOURCE_TYPE="objstore",
        PROVIDER="S3",
        ENDPOINT=proxy.url,
        BUCKET="resume",
        MODEL_PATH="big",
        **AWS_TEST_CREDENTIALS,
    )

    def ranges() -> list[str]:
        return [
            line.split(":", 1)[1].strip()
            for head in proxy.request_heads
            for line in head.split("\r\n")
            if line.lower().startswith("range:")
        ]

    yield Protocol(env, Path("models--big/model.safetensors"), lambda r: setattr(proxy, "rate", r), ranges)
    proxy.stop()


@pytest.fixture(params=["huggingface", "oss", "s3"])
def protocol(request: pytest.FixtureRequest, model_dir: Path) -> Iterator[Protocol]:
    if request.param == "huggingface":
        yield from _hub(model_dir)
    elif request.param == "oss":
        yield from _oss(model_dir)
    else:
        yield from _s3(model_dir, request.getfixturevalue("s3"), request.getfixturevalue("moto_url"))


def test_a_killed_download_resumes_from_its_partial_file(protocol: Protocol, model_dir: Path) -> None:
    protocol.set_rate(SLOW)
    partial = model_dir / protocol.file.with_name(protocol.file.name + ".partial")
    first = start_loader(protocol.env)
    eventually_sync(lambda: partial.is_file() and partial.stat().st_size > 500_000, what="500 kB downloaded")
    first.kill()
    finish(first)
    kept = partial.stat().st_size
    assert 0 < kept < len(BIG)
    assert not (model_dir / protocol.file).exists()

    protocol.set_rate(None)
    run = run_loader(protocol.env)

    assert run.code == 0, run.stderr
    assert (model_dir / protocol.file).read_bytes() == BIG
    assert not partial.exists()
    resumed_from = [int(r.removeprefix("bytes=").rstrip("-")) for r in protocol.ranges() if r != "bytes=0-"]
    assert resumed_from == [kept]
    assert run.event("load.complete")["bytes_fetched"] <= len(BIG) - kept + len(b"{}")
