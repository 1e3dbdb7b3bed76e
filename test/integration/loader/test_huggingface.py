"""The loader against a local Hugging Face Hub API server (HF_ENDPOINT)."""

from __future__ import annotations

import json
from pathlib import Path

from llmaz_dev.testing.storage import HubRepo, HubServer

from .conftest import loader_env, run_loader, sample_repo


def hub_env(hub: HubServer, model_dir: Path, **env: str) -> dict[str, str]:
    defaults = {
        "MODEL_SOURCE_TYPE": "modelhub",
        "MODEL_HUB_NAME": "Huggingface",
        "HF_ENDPOINT": hub.url,
        "MODEL_ID": "facebook/opt-125m",
        "REVISION": "main",
    }
    return loader_env(model_dir, **{**defaults, **env})


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }


def test_a_whole_repo_lands_in_the_models_directory_with_nested_paths(hub: HubServer, model_dir: Path) -> None:
    hub.repos["facebook/opt-125m"] = repo = sample_repo()

    run = run_loader(hub_env(hub, model_dir))

    assert run.code == 0, run.stderr
    assert tree(model_dir / "models--facebook--opt-125m") == repo.revisions["main"]
    complete = run.event("load.complete")
    assert complete["files"] == 6
    assert complete["bytes_fetched"] == sum(len(d) for d in repo.revisions["main"].values())


def test_a_single_file_lands_directly_under_the_models_root(hub: HubServer, model_dir: Path) -> None:
    hub.repos["facebook/opt-125m"] = repo = sample_repo()

    run = run_loader(hub_env(hub, model_dir, MODEL_FILENAME="q4.gguf"))

    assert run.code == 0, run.stderr
    assert (model_dir / "q4.gguf").read_bytes() == repo.revisions["main"]["q4.gguf"]
    assert [p.name for p in model_dir.iterdir() if not p.name.startswith(".")] == ["q4.gguf"]
    assert (model_dir / ".q4.gguf.llmaz-download.json").is_file()


def test_allow_and_ignore_patterns_select_the_files(hub: HubServer, model_dir: Path) -> None:
    hub.repos["facebook/opt-125m"] = sample_repo()

    run = run_loader(
        hub_env(hub, model_dir, MODEL_ALLOW_PATTERNS="*.json,tokenizer/*", MODEL_IGNORE_PATTERNS="*merges.txt")
    )

    assert run.code == 0, run.stderr
    assert sorted(tree(model_dir / "models--facebook--opt-125m")) == ["config.json", "tokenizer/vocab.txt"]


def test_the_requested_revision_is_downloaded_at_its_commit(hub: HubServer, model_dir: Path) -> None:
    hub.repos["facebook/opt-125m"] = repo = sample_repo()

    run = run_loader(hub_env(hub, model_dir, REVISION="v2"))

    assert run.code == 0, run.stderr
    assert tree(model_dir / "models--facebook--opt-125m") == repo.revisions["v2"]
    resolves = [s.path for s in hub.seen if "/resolve/" in s.path]
    assert resolves
    assert all(f"/resolve/{repo.commits['v2']}/" in path for path in resolves)


def test_a_restarted_loader_with_a_matching_marker_makes_no_request(hub: HubServer, model_dir: Path) -> None:
    hub.repos["facebook/opt-125m"] = sample_repo()
    assert run_loader(hub_env(hub, model_dir)).code == 0
    hub.seen.clear()

    run = run_loader(hub_env(hub, model_dir))

    assert run.code == 0, run.stderr
    assert run.event("load.already_complete")["files"] == 6
    assert hub.seen == []


def test_a_marker_for_another_revision_does_not_count_as_complete(hub: HubServer, model_dir: Path) -> None:
    hub.repos["facebook/opt-125m"] = repo = sample_repo()
    assert run_loader(hub_env(hub, model_dir, REVISION="v2")).code == 0

    run = run_loader(hub_env(hub, model_dir, REVISION="main"))

    assert run.code == 0, run.stderr
    assert tree(model_dir / "models--facebook--opt-125m") == repo.revisions["main"]
    marker = json.loads((model_dir / "models--facebook--opt-125m" / ".llmaz-download.json").read_text())
    assert marker["revision"] == repo.commits["main"]


def test_an_unknown_model_exits_3_naming_the_model_and_the_fix(hub: HubServer, model_dir: Path) -> None:
    run = run_loader(hub_env(hub, model_dir, MODEL_ID="nobody/missing"))

    assert run.code == 3
    failed = run.event("load.failed")
    assert failed["reason"] == "NotFound"
    assert "'nobody/missing'" in failed["message"]
    assert "spec.source.modelHub.modelID" in failed["message"]


def test_a_private_model_without_a_token_exits_4_naming_the_secret(hub: HubServer, model_dir: Path) -> None:
    hub.repos["org/private"] = HubRepo(revisions={"main": {"config.json": b"{}"}}, token="hf_secret")

    run = run_loader(hub_env(hub, model_dir, MODEL_ID="org/private"))

    assert run.code == 4
    message = run.event("load.failed")["message"]
    assert "'org/private'" in message
    assert "HTTP 401" in message
    assert "no token was provided" in message
    assert "'modelhub-secret'" in message


def test_a_private_model_loads_with_the_token_from_the_secret(hub: HubServer, model_dir: Path) -> None:
    hub.repos["org/private"] = HubRepo(revisions={"main": {"config.json": b"{}"}}, token="hf_secret")

    run = run_loader(hub_env(hub, model_dir, MODEL_ID="org/private", HUGGING_FACE_HUB_TOKEN="hf_secret"))

    assert run.code == 0, run.stderr
    assert (model_dir / "models--org--private" / "config.json").read_bytes() == b"{}"


def test_a_missing_revision_or_file_exits_3_naming_the_field_to_fix(hub: HubServer, model_dir: Path) -> None:
    hub.repos["facebook/opt-125m"] = sample_repo()

    revision = run_loader(hub_env(hub, model_dir, REVISION="v9"))
    filename = run_loader(hub_env(hub, model_dir, MODEL_FILENAME="absent.gguf"))

    assert (revision.code, filename.code) == (3, 3)
    assert "spec.source.modelHub.revision" in revision.event("load.failed")["message"]
    assert "'absent.gguf'" in filename.event("load.failed")["message"]


def test_server_errors_are_retried_with_backoff(hub: HubServer, model_dir: Path) -> None:
    hub.repos["facebook/opt-125m"] = repo = sample_repo()
    hub.fail_next = [503, 502]

    run = run_loader(hub_env(hub, model_dir))

    assert run.code == 0, run.stderr
    assert [e["attempt"] for e in run.events if e["event"] == "download.retry"] == [1, 2], run.stderr
    assert tree(model_dir / "models--facebook--opt-125m") == repo.revisions["main"]


def test_a_server_that_keeps_failing_exits_5_after_the_attempts(hub: HubServer, model_dir: Path) -> None:
    hub.repos["facebook/opt-125m"] = sample_repo()
    hub.fail_next = [503] * 10

    run = run_loader(hub_env(hub, model_dir))

    assert run.code == 5
    assert "gave up after 3 attempts" in run.event("load.failed")["message"]


def test_a_missing_model_id_is_a_configuration_error_naming_the_variable(hub: HubServer, model_dir: Path) -> None:
    env = hub_env(hub, model_dir)
    del env["MODEL_ID"]

    run = run_loader(env)

    assert run.code == 2
    assert "MODEL_ID is not set" in run.event("load.failed")["message"]
