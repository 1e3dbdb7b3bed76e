"""API keys: Bearer keys from a file, compared in constant time, re-read when the file changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmaz.gateway.proxy.auth import ApiKeys, parse_keys
from llmaz.gateway.proxy.errors import OpenAIError
from llmaz_dev.testing.clock import FakeClock

from .support import Cluster, engines, running_gateway


def code(keys: ApiKeys, authorization: str | None) -> str | None:
    """None when `authorization` is accepted, else the 401's code."""
    try:
        keys.check(authorization)
    except OpenAIError as error:
        return error.code if error.status == 401 else f"unexpected status {error.status}"
    return None


def keys_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "keys"
    path.write_text(text)
    return path


def test_the_file_holds_one_key_per_line_without_blanks_comments_or_surrounding_space() -> None:
    assert parse_keys("a\n\n  b  \n# c\n\t#d\r\ne\r\n") == parse_keys("a\nb\ne")
    assert len(parse_keys("a\nb\ne")) == 3


def test_a_missing_or_malformed_authorization_is_missing_a_key_and_a_wrong_one_is_invalid(tmp_path: Path) -> None:
    keys = ApiKeys(keys_file(tmp_path, "sk-right\nsk-other\n"))
    keys.load()
    for header in (None, "", "Bearer", "Bearer   ", "Basic c2stcmlnaHQ=", "sk-right"):
        assert code(keys, header) == "missing_api_key", header
    for header in ("Bearer sk-wrong", "Bearer sk-righ", "Bearer sk-right-and-more", "Bearer SK-RIGHT"):
        assert code(keys, header) == "invalid_api_key", header
    for header in ("Bearer sk-right", "bearer sk-other", "  Bearer   sk-right  "):
        assert code(keys, header) is None, header


def test_a_changed_file_is_reread_at_most_once_per_interval(tmp_path: Path) -> None:
    path = keys_file(tmp_path, "old\n")
    clock = FakeClock()
    keys = ApiKeys(path, interval=5.0, clock=clock)
    keys.load()
    # A Secret update: a new file swapped in (new inode), as the kubelet's symlink swap does.
    replacement = tmp_path / "keys.new"
    replacement.write_text("new\n")
    os.replace(replacement, path)
    assert code(keys, "Bearer old") is None  # not checked again yet
    clock.step(5.0)
    assert code(keys, "Bearer old") == "invalid_api_key"
    assert code(keys, "Bearer new") is None


def test_an_in_place_rewrite_is_noticed_by_its_modification_time(tmp_path: Path) -> None:
    path = keys_file(tmp_path, "key-1\n")
    clock = FakeClock()
    keys = ApiKeys(path, interval=1.0, clock=clock)
    keys.load()
    stat = path.stat()
    path.write_text("key-2\n")  # same size, same inode
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    clock.step(1.0)
    assert code(keys, "Bearer key-2") is None
    assert code(keys, "Bearer key-1") == "invalid_api_key"


def test_an_unreadable_file_keeps_the_last_keys_and_an_emptied_one_refuses_everyone(tmp_path: Path) -> None:
    path = keys_file(tmp_path, "key\n")
    clock = FakeClock()
    keys = ApiKeys(path, interval=1.0, clock=clock)
    keys.load()
    path.unlink()
    clock.step(1.0)
    assert code(keys, "Bearer key") is None
    path.write_text("# nobody\n")
    clock.step(1.0)
    assert code(keys, "Bearer key") == "invalid_api_key"


def test_a_missing_file_fails_the_first_load(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ApiKeys(tmp_path / "absent").load()


async def test_with_keys_the_api_answers_401_without_the_right_key_and_the_engine_never_sees_the_key(
    tmp_path: Path,
) -> None:
    keys = ApiKeys(keys_file(tmp_path, "sk-1\n"))
    keys.load()
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, api_keys=keys) as gw:
            status, answer = await gw.post("/v1/chat/completions", {"model": "m"})
            assert (status, answer["error"]["code"]) == (401, "missing_api_key")
            async with gw.session.get(gw.url + "/v1/models", headers={"Authorization": "Bearer sk-2"}) as resp:
                assert resp.status == 401
                assert resp.headers["WWW-Authenticate"] == "Bearer"
            status, answer = await gw.post("/v1/nope", {}, headers={"Authorization": "Bearer sk-2"})
            assert status == 401  # nothing, not even which paths exist, without a key
            status, _ = await gw.post("/v1/chat/completions", {"model": "m"}, headers={"Authorization": "Bearer sk-1"})
            assert status == 200
            assert [r.headers.get("Authorization") for r in engine.requests] == [None]
            assert gw.sample("llmaz_gateway_requests_total", model="", code="401") == 3
