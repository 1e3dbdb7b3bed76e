"""Adapters of the served model: where each lands, the loader that fetches it, the engine flags that load it, and
the finding that names it when its loader fails."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import OpenModel, Playground
from llmaz.apis.modelpath import loader_target
from llmaz.controllers.builders import (
    AdaptersUnsupportedError,
    InvalidModelSourceError,
    build_leader_worker_set,
    build_service,
    diagnose_pod,
)
from llmaz.controllers.builders.adapters import adapter_flags

from .factories import (
    AWS_KEYS,
    HF_TOKENS,
    LOADER_IMAGE,
    LOADER_MOUNT,
    MODEL_VOLUME,
    PLAYGROUND_UID,
    backend,
    env,
    only_runner,
    single_host_service,
    worker,
)

HUB = {"modelHub": {"name": "Huggingface", "modelID": "Qwen/Qwen2-0.5B-Instruct", "revision": "main"}}


def model_with(*adapters: dict[str, Any], source: dict[str, Any] | None = None, name: str = "m") -> OpenModel:
    spec = {"familyName": "qwen2", "source": source or HUB, "adapters": list(adapters)}
    return OpenModel.from_dict({"metadata": {"name": name}, "spec": spec})


def adapter(name: str, source: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"name": name, "source": source, **fields}


# Per source kind: adapter source, where the engine reads it with the loader, and with the loader skipped.
PATHS: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "hub repository",
        {"modelHub": {"modelID": "org/sql-lora"}},
        "/workspace/models/adapters--a",
        "org/sql-lora",
    ),
    (
        "hub file",
        {"modelHub": {"modelID": "org/lora-gguf", "filename": "lora-f16.gguf"}},
        "/workspace/models/adapters--a/lora-f16.gguf",
        "org/lora-gguf",
    ),
    ("s3 file", {"uri": "s3://b/loras/tiny-lora.gguf"}, "/workspace/models/adapters--a/tiny-lora.gguf", ""),
    ("s3 directory", {"uri": "s3://b/loras/sql/"}, "/workspace/models/adapters--a", ""),
    ("oss file", {"uri": "oss://b.endpoint/l/x.safetensors"}, "/workspace/models/adapters--a/x.safetensors", ""),
    ("gcs directory", {"uri": "gcs://b/l/sql"}, "/workspace/models/adapters--a", ""),
    ("host file", {"uri": "host:///mnt/loras/a.gguf"}, "/mnt/loras/a.gguf", "/mnt/loras/a.gguf"),
]


def vllm_modules(open_model: OpenModel, skip: bool = False) -> dict[str, str]:
    flags = adapter_flags("vllm", open_model, skip)
    modules = flags[flags.index("--lora-modules") + 1 : flags.index("--max-loras")]
    return dict(module.split("=", 1) for module in modules)


@pytest.mark.parametrize(("case", "source", "loaded", "skipped"), PATHS, ids=[p[0] for p in PATHS])
def test_each_adapter_source_lands_in_its_own_place(
    case: str, source: dict[str, Any], loaded: str, skipped: str
) -> None:
    open_model = model_with(adapter("a", source))

    assert vllm_modules(open_model) == {"a": loaded}
    assert vllm_modules(open_model, skip=True) == {"a": skipped or source.get("uri", "")}


@pytest.mark.parametrize(("case", "source", "loaded", "skipped"), PATHS[:-1], ids=[p[0] for p in PATHS[:-1]])
def test_the_adapters_loader_writes_where_the_engine_reads(
    case: str, source: dict[str, Any], loaded: str, skipped: str
) -> None:
    lws = build_leader_worker_set(single_host_service(), [model_with(adapter("a", source))], LOADER_IMAGE)
    loaders = worker(lws)["spec"]["initContainers"]

    assert [loader["name"] for loader in loaders] == ["model-loader", "model-loader-adapter-0"]
    variables = {e["name"]: e["value"] for e in loaders[1]["env"] if "value" in e}
    assert variables["ADAPTER_NAME"] == "a"
    assert loader_target(variables).model_path == loaded
    assert loaders[1]["volumeMounts"] == LOADER_MOUNT


def test_adapter_paths_never_meet_the_models_or_each_others() -> None:
    file_source = {"uri": "s3://b/same/lora.gguf"}
    open_model = model_with(
        adapter("one", file_source), adapter("two", file_source), source={"uri": "s3://b/lora.gguf"}
    )

    assert vllm_modules(open_model) == {
        "one": "/workspace/models/adapters--one/lora.gguf",
        "two": "/workspace/models/adapters--two/lora.gguf",
    }


def playground_with(open_model: OpenModel, backend_name: str, args: list[str] | None = None) -> Playground:
    config: dict[str, Any] = {"backendName": backend_name}
    if args is not None:
        config["args"] = args
    spec = {"replicas": 1, "modelClaim": {"modelName": open_model.metadata.name}, "backendRuntimeConfig": config}
    metadata = {"name": "pg", "namespace": "ns", "uid": PLAYGROUND_UID, "generation": 1}
    return Playground.from_dict({"metadata": metadata, "spec": spec})


def rendered_args(open_model: OpenModel, backend_name: str, args: list[str] | None = None) -> list[str]:
    service = build_service(playground_with(open_model, backend_name, args), [open_model], backend(backend_name))
    container = service["spec"]["workloadTemplate"]["workerTemplate"]["spec"]["containers"][0]
    rendered: list[str] = container["args"]
    return rendered


TWO = model_with(
    adapter("sql", {"uri": "s3://b/loras/sql.gguf"}),
    adapter("chat", {"uri": "host:///mnt/loras/chat.gguf"}, scale=0.5),
    source={"uri": "s3://b/models/qwen.gguf"},
)
SQL, CHAT = "/workspace/models/adapters--sql/sql.gguf", "/mnt/loras/chat.gguf"


def test_llamacpp_loads_the_adapters_in_spec_order_with_scale_zero_after_the_configs_arguments() -> None:
    # llama.cpp of llama-cpp-python 0.3.36: --lora-scaled FNAME:SCALE,... keeps every adapter's own scale 0, which
    # requests without a lora field use; a repeated flag keeps only its last value.
    args = rendered_args(TWO, "llamacpp", ["-fa"])

    assert args == [
        "-m",
        "/workspace/models/qwen.gguf",
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
        "--metrics",
        "--lora-scaled",
        f"{SQL}:0,{CHAT}:0",
        "--lora-init-without-apply",
        "-fa",
    ]


def test_vllm_enables_lora_with_one_module_per_adapter_and_room_for_all() -> None:
    # vLLM v0.7.3 to v0.30.0 (config/backends/vllm.yaml): --enable-lora, --lora-modules name=path ..., --max-loras.
    args = rendered_args(TWO, "vllm")

    start = args.index("--enable-lora")
    assert args[start:] == ["--enable-lora", "--lora-modules", f"sql={SQL}", f"chat={CHAT}", "--max-loras", "2"]


def test_sglang_names_each_adapter_in_lora_paths() -> None:
    # SGLang v0.4.5 to v0.5.19 (config/backends/sglang.yaml): --lora-paths name=path ...; current releases turn
    # --enable-lora on by themselves when --lora-paths is given, and v0.4.5 has no such flag.
    args = rendered_args(TWO, "sglang")

    assert args[args.index("--lora-paths") :] == ["--lora-paths", f"sql={SQL}", f"chat={CHAT}"]
    assert "--enable-lora" not in args


@pytest.mark.parametrize("backend_name", ["llamacpp", "vllm", "sglang", "tgi", "ollama"])
def test_a_model_without_adapters_gets_no_adapter_flags(backend_name: str) -> None:
    plain = model_with(source={"uri": "s3://b/models/qwen.gguf"})

    assert not {"--lora-scaled", "--enable-lora", "--lora-paths"} & set(rendered_args(plain, backend_name))


@pytest.mark.parametrize("backend_name", ["tgi", "ollama", "tensorrt-llm"])
def test_a_backend_that_cannot_load_adapters_is_refused_naming_the_ones_that_can(backend_name: str) -> None:
    with pytest.raises(AdaptersUnsupportedError) as raised:
        rendered_args(TWO, backend_name)

    assert raised.value.message == (
        f"OpenModel m has adapters, which BackendRuntime {backend_name} cannot load: serve it with one of "
        "llamacpp, sglang, vllm, or remove spec.adapters"
    )


def test_an_ollama_adapter_is_an_invalid_source_naming_the_adapter() -> None:
    open_model = model_with(adapter("sql", {"uri": "ollama://qwen2:0.5b"}))

    with pytest.raises(InvalidModelSourceError, match="OpenModel m has an invalid source: adapter sql: an ollama"):
        rendered_args(open_model, "vllm")
    with pytest.raises(InvalidModelSourceError, match="adapter sql: an ollama"):
        build_leader_worker_set(single_host_service(), [open_model], LOADER_IMAGE)


def test_llamacpp_refuses_an_adapter_path_its_flag_cannot_carry() -> None:
    open_model = model_with(adapter("sql", {"uri": "host:///mnt/a,b.gguf"}))

    with pytest.raises(InvalidModelSourceError, match=r"adapter sql: llama\.cpp cannot load /mnt/a,b\.gguf"):
        rendered_args(open_model, "llamacpp")
    assert vllm_modules(open_model) == {"sql": "/mnt/a,b.gguf"}


def test_host_adapters_get_a_volume_each_and_loaded_ones_share_the_model_volume() -> None:
    open_model = model_with(
        adapter("a", {"uri": "host:///mnt/loras/a.gguf"}),
        adapter("b", {"uri": "s3://b/l/b.gguf"}),
        source={"uri": "host:///mnt/models/qwen"},
    )
    pod = worker(build_leader_worker_set(single_host_service(), [open_model], LOADER_IMAGE))["spec"]

    assert [c["name"] for c in pod["initContainers"]] == ["model-loader-adapter-1"]
    assert pod["volumes"] == [
        {"name": "model-volume-0", "hostPath": {"path": "/mnt/models/qwen"}},
        {"name": "adapter-volume-0", "hostPath": {"path": "/mnt/loras/a.gguf"}},
        MODEL_VOLUME,
    ]
    assert [m["mountPath"] for m in only_runner({"spec": pod})["volumeMounts"]] == [
        "/mnt/models/qwen",
        "/mnt/loras/a.gguf",
        "/workspace/models/",
    ]


def test_skipping_the_loader_gives_the_runner_the_adapters_credentials() -> None:
    open_model = model_with(adapter("a", {"uri": "s3://b/l/a.gguf"}))
    svc = single_host_service(annotations={"llmaz.io/skip-model-loader": "true"})
    pod = worker(build_leader_worker_set(svc, [open_model], LOADER_IMAGE))["spec"]

    assert "initContainers" not in pod
    assert only_runner({"spec": pod})["env"] == [*HF_TOKENS, *AWS_KEYS]


def test_only_the_main_models_adapters_are_loaded() -> None:
    draft = model_with(adapter("d", {"uri": "s3://b/l/d.gguf"}), name="draft")
    main = model_with(adapter("a", {"uri": "s3://b/l/a.gguf"}))
    svc = single_host_service(models=[{"name": "m", "role": "main"}, {"name": "draft", "role": "draft"}])
    pod = worker(build_leader_worker_set(svc, [main, draft], LOADER_IMAGE))["spec"]

    assert [c["name"] for c in pod["initContainers"]] == ["model-loader", "model-loader-1", "model-loader-adapter-0"]
    assert env("ADAPTER_NAME", "a") in pod["initContainers"][2]["env"]


def loader_pod(termination: dict[str, Any]) -> dict[str, Any]:
    loader = {"name": "model-loader-adapter-1", "image": "loader:v1", "env": [env("ADAPTER_NAME", "sql")]}
    status = {"name": "model-loader-adapter-1", "state": {"terminated": termination}, "ready": False}
    return {
        "metadata": {"name": "pg-0"},
        "spec": {"initContainers": [loader], "containers": [{"name": "model-runner", "image": "e"}]},
        "status": {"initContainerStatuses": [status]},
    }


def test_a_failed_adapter_loader_is_named_with_its_adapter_once() -> None:
    message = "adapter sql: NotFound: s3://b/l/sql.gguf does not exist (NoSuchKey): fix the OpenModel's source"
    finding = diagnose_pod(loader_pod({"exitCode": 3, "reason": "Error", "message": message}))

    assert finding is not None
    assert finding.adapter == "sql"
    assert finding.message == (
        "ModelLoaderFailed: pod pg-0, init container model-loader-adapter-1 (adapter sql) exited with code 3: "
        "NotFound: s3://b/l/sql.gguf does not exist (NoSuchKey): fix the OpenModel's source"
    )


def test_an_adapter_loader_killed_without_a_message_is_named_with_its_adapter() -> None:
    finding = diagnose_pod(loader_pod({"exitCode": 137, "reason": "OOMKilled"}))

    assert finding is not None
    assert finding.message == (
        "ModelLoaderFailed: pod pg-0, init container model-loader-adapter-1 (adapter sql) exited with code 137 "
        "(OOMKilled)"
    )
