"""Adapters that fail for good are left out: which failures count, how the record is kept, and what the engine
flags, the loaders and the conditions then are."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import OpenModel, Service
from llmaz.controllers.builders import build_leader_worker_set, build_service, playground_status
from llmaz.controllers.builders.adapters import adapter_loader_envs, left_out_adapters, unavailable_adapters
from llmaz.controllers.builders.diagnosis import LOADER_EXITS_FOR_GOOD, PodFinding, unusable_adapters
from llmaz.controllers.builders.status import with_adapters
from llmaz.loader.errors import ExitCode

from .factories import LATER, LOADER_IMAGE, NOW, backend, env, only_runner, runner, single_host_service, worker
from .test_adapters import adapter, model_with, playground_with

SQL_SOURCE = {"uri": "s3://b/loras/sql.gguf"}
CHAT_SOURCE = {"uri": "s3://b/loras/chat.gguf"}
SQL_PATH = "/workspace/models/adapters--sql/sql.gguf"
CHAT_PATH = "/workspace/models/adapters--chat/chat.gguf"
PATHS = {"sql": SQL_PATH, "chat": CHAT_PATH}
MODEL = model_with(adapter("sql", SQL_SOURCE), adapter("chat", CHAT_SOURCE), source={"uri": "s3://b/m.gguf"})
# llama.cpp (llama-cpp-python 0.3.36's) given an adapter made for another model, as its log ends.
WRONG_BASE_LOG = "\n".join(
    [
        "0.00.008.166 I srv    load_model: loading model '/workspace/models/m.gguf'",
        "0.00.246.495 E llama_adapter_lora_init_from_file_ptr: failed to apply lora adapter: tensor "
        "'blk.0.attn_q.weight' has incorrect shape (hint: maybe wrong base model?)",
        f"0.00.246.543 E cmn  common_init_: failed to load lora adapter '{CHAT_PATH}'",
        "0.00.246.545 E cmn  common_init_: failed to create context with model '/workspace/models/m.gguf'",
        "0.00.247.226 E srv  llama_server: exiting due to model loading error",
    ]
)


def pod(
    name: str,
    *,
    loader_exit: int | None = None,
    engine_exit: int | None = None,
    engine_log: str = "",
    ready: bool = False,
    deleted: bool = False,
) -> dict[str, Any]:
    """A pod of the model: the sql adapter's loader (index 0) and the engine, each ended as given."""
    loader = {"name": "model-loader-adapter-0", "image": "loader:v1", "env": [env("ADAPTER_NAME", "sql")]}
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if loader_exit is not None:
        terminated = {"exitCode": loader_exit, "message": f"adapter sql: exit {loader_exit}"}
        status["initContainerStatuses"] = [{"name": loader["name"], "state": {"terminated": terminated}}]
    if engine_exit is not None:
        last = {"terminated": {"exitCode": engine_exit, "reason": "Error", "message": engine_log}}
        waiting = {"waiting": {"reason": "CrashLoopBackOff"}}
        status["containerStatuses"] = [{"name": "model-runner", "ready": False, "state": waiting, "lastState": last}]
    metadata: dict[str, Any] = {"name": name}
    if deleted:
        metadata["deletionTimestamp"] = "2025-01-02T03:04:05Z"
    spec = {"initContainers": [loader], "containers": [{"name": "model-runner", "image": "e"}]}
    return {"metadata": metadata, "spec": spec, "status": status}


def test_the_loader_exits_that_count_as_for_good_are_the_loaders_own() -> None:
    assert {ExitCode.BAD_CONFIGURATION, ExitCode.NOT_FOUND, ExitCode.UNAUTHORIZED} == LOADER_EXITS_FOR_GOOD


FAILURES: list[tuple[str, list[dict[str, Any]], dict[str, str]]] = [
    ("loader: not found", [pod("pg-0", loader_exit=3)], {"sql": "ModelLoaderFailed"}),
    ("loader: bad configuration", [pod("pg-0", loader_exit=2)], {"sql": "ModelLoaderFailed"}),
    ("loader: unauthorized", [pod("pg-0", loader_exit=4)], {"sql": "ModelLoaderFailed"}),
    ("loader: transient, retried by kubelet", [pod("pg-0", loader_exit=5)], {}),
    ("loader: killed", [pod("pg-0", loader_exit=137)], {}),
    ("loader: completed", [pod("pg-0", loader_exit=0)], {}),
    ("engine: adapter of another model", [pod("pg-0", engine_exit=1, engine_log=WRONG_BASE_LOG)], {"chat": "x"}),
    ("engine: crash naming no adapter", [pod("pg-0", engine_exit=1, engine_log="out of memory")], {}),
    (
        "engine: a longer path is another adapter's",
        [pod("pg-0", engine_exit=1, engine_log=f"failed to load lora adapter '{SQL_PATH}.bak'")],
        {},
    ),
    ("ready pod", [pod("pg-0", loader_exit=3, ready=True)], {}),
    ("deleted pod", [pod("pg-0", loader_exit=3, deleted=True)], {}),
    (
        "both, in spec order",
        [pod("pg-1", engine_exit=1, engine_log=WRONG_BASE_LOG), pod("pg-0", loader_exit=3)],
        {"sql": "ModelLoaderFailed", "chat": "x"},
    ),
]


@pytest.mark.parametrize(("case", "pods", "expected"), FAILURES, ids=[f[0] for f in FAILURES])
def test_which_failures_leave_an_adapter_out(case: str, pods: list[dict[str, Any]], expected: dict[str, str]) -> None:
    found = unusable_adapters(pods, PATHS)

    assert list(found) == list(expected)
    for name, reason in expected.items():
        assert found[name].adapter == name
        assert found[name].reason == (reason if reason != "x" else "ContainerCrashLooping")


def test_an_adapter_the_engine_cannot_apply_is_named_with_the_engines_reason() -> None:
    (finding,) = unusable_adapters([pod("pg-0", engine_exit=1, engine_log=WRONG_BASE_LOG)], PATHS).values()

    assert finding.message == (
        "ContainerCrashLooping: pod pg-0, container model-runner (adapter chat) exited with code 1: 0.00.246.495 E "
        "llama_adapter_lora_init_from_file_ptr: failed to apply lora adapter: tensor 'blk.0.attn_q.weight' has "
        "incorrect shape (hint: maybe wrong base model?)"
    )


def test_the_first_pod_by_name_names_the_failure() -> None:
    found = unusable_adapters([pod("pg-1", loader_exit=4), pod("pg-0", loader_exit=3)], PATHS)

    assert "pod pg-0," in found["sql"].message


def service_with(unavailable: list[dict[str, Any]] | None, args: list[str] | None = None) -> Service:
    svc = single_host_service(container=runner(args=args) if args is not None else None)
    status: dict[str, Any] = {"replicas": 1}
    if unavailable is not None:
        status["unavailableAdapters"] = unavailable
    return Service.from_dict({**svc.to_dict(), "status": status})


def record(name: str, source: dict[str, Any], message: str = "ModelLoaderFailed: pod pg-0 ...") -> dict[str, Any]:
    return {"name": name, "source": source, "reason": "ModelLoaderFailed", "message": message}


SQL_FAILED = PodFinding("pg-0", "ModelLoaderFailed", "exited with code 3: NotFound", "model-loader-adapter-0", True, 3)

RECORDS: list[tuple[str, list[dict[str, Any]] | None, OpenModel, dict[str, PodFinding], list[str]]] = [
    ("nothing failed", None, MODEL, {}, []),
    ("a new failure is recorded", None, MODEL, {"sql": SQL_FAILED}, ["sql"]),
    ("kept once its pods are gone", [record("sql", SQL_SOURCE)], MODEL, {}, ["sql"]),
    (
        "a changed source is tried again",
        [record("sql", SQL_SOURCE)],
        model_with(adapter("sql", {"uri": "s3://b/loras/sql-v2.gguf"}), adapter("chat", CHAT_SOURCE)),
        {},
        [],
    ),
    ("a removed adapter is forgotten", [record("sql", SQL_SOURCE)], model_with(adapter("chat", CHAT_SOURCE)), {}, []),
    (
        "spec order, whatever the order found",
        [record("chat", CHAT_SOURCE)],
        MODEL,
        {"sql": SQL_FAILED},
        ["sql", "chat"],
    ),
    (
        "a failure of an adapter no longer listed",
        None,
        model_with(adapter("chat", CHAT_SOURCE)),
        {"sql": SQL_FAILED},
        [],
    ),
]


@pytest.mark.parametrize(("case", "recorded", "open_model", "found", "expected"), RECORDS, ids=[r[0] for r in RECORDS])
def test_the_record_of_unavailable_adapters(
    case: str,
    recorded: list[dict[str, Any]] | None,
    open_model: OpenModel,
    found: dict[str, PodFinding],
    expected: list[str],
) -> None:
    entries = unavailable_adapters(service_with(recorded), open_model, found)

    assert [entry["name"] for entry in entries] == expected
    assert left_out_adapters(service_with(entries), open_model) == frozenset(expected)


def test_a_new_record_carries_the_source_and_the_finding() -> None:
    (entry,) = unavailable_adapters(service_with(None), MODEL, {"sql": SQL_FAILED})

    assert entry == {
        "name": "sql",
        "source": SQL_SOURCE,
        "reason": "ModelLoaderFailed",
        "message": "ModelLoaderFailed: pod pg-0, init container model-loader-adapter-0 exited with code 3: NotFound",
    }


def engine_args(left_out: frozenset[str], open_model: OpenModel = MODEL) -> list[str]:
    svc = build_service(playground_with(open_model, "llamacpp"), [open_model], backend("llamacpp"), left_out=left_out)
    args: list[str] = only_runner(svc["spec"]["workloadTemplate"]["workerTemplate"])["args"]
    return args


def test_the_engine_is_started_without_the_adapters_left_out() -> None:
    assert engine_args(frozenset())[-3:] == [
        "--lora-scaled",
        f"{SQL_PATH}:0,{CHAT_PATH}:0",
        "--lora-init-without-apply",
    ]
    assert engine_args(frozenset({"sql"}))[-3:] == ["--lora-scaled", f"{CHAT_PATH}:0", "--lora-init-without-apply"]
    assert "--lora-scaled" not in engine_args(frozenset({"sql", "chat"}))


def test_an_engine_serving_adapters_ends_its_termination_message_with_its_log() -> None:
    def policy(open_model: OpenModel) -> Any:
        svc = build_service(playground_with(open_model, "llamacpp"), [open_model], backend("llamacpp"))
        return only_runner(svc["spec"]["workloadTemplate"]["workerTemplate"]).get("terminationMessagePolicy")

    assert policy(MODEL) == "FallbackToLogsOnError"
    assert policy(model_with()) is None  # a model without adapters keeps llmaz's pod template


def loaders(svc: Service, open_model: OpenModel = MODEL) -> list[str]:
    pod_spec = worker(build_leader_worker_set(svc, [open_model], LOADER_IMAGE))["spec"]
    return [container["name"] for container in pod_spec.get("initContainers") or ()]


def test_a_loader_is_left_out_once_no_engine_names_its_adapter() -> None:
    flags_without_sql = ["--lora-scaled", f"{CHAT_PATH}:0"]
    flags_with_sql = ["--lora-scaled", f"{SQL_PATH}:0,{CHAT_PATH}:0"]
    failed = [record("sql", SQL_SOURCE)]

    assert loaders(service_with(None, flags_with_sql)) == [
        "model-loader",
        "model-loader-adapter-0",
        "model-loader-adapter-1",
    ]
    # Recorded, but the engine still names it (its Playground has not dropped the flag yet, or the Service was
    # written by hand): the loader stays, so no engine starts on a path that is not there.
    assert loaders(service_with(failed, flags_with_sql)) == [
        "model-loader",
        "model-loader-adapter-0",
        "model-loader-adapter-1",
    ]
    # The other adapter keeps its index.
    assert loaders(service_with(failed, flags_without_sql)) == ["model-loader", "model-loader-adapter-1"]
    changed = model_with(adapter("sql", {"uri": "s3://b/loras/sql-v2.gguf"}), adapter("chat", CHAT_SOURCE))
    assert loaders(service_with(failed, flags_without_sql), changed) == [
        "model-loader",
        "model-loader-adapter-0",
        "model-loader-adapter-1",
    ]


def test_the_adapters_condition_says_which_adapter_and_why_then_that_none_is_left_out() -> None:
    svc = service_with(None)
    entries = [record("sql", SQL_SOURCE, "ModelLoaderFailed: pod pg-0, init container ... code 3: NotFound: ...")]

    assert "conditions" not in with_adapters(svc, {"replicas": 1}, [], MODEL, NOW)
    failed = with_adapters(svc, {"replicas": 1}, entries, MODEL, NOW)
    assert failed["unavailableAdapters"] == entries
    (condition,) = failed["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "AdaptersReady",
        "False",
        "AdapterUnavailable",
    )
    assert condition["message"] == (
        "adapter sql (spec.adapters[0] of OpenModel m) is left out, the model serves without it: ModelLoaderFailed: "
        "pod pg-0, init container ... code 3: NotFound: ...; fix or remove the adapter: a change of its source tries "
        "it again"
    )
    fixed = with_adapters(svc, failed, [], MODEL, LATER)
    assert "unavailableAdapters" not in fixed
    assert [(c["status"], c["reason"], c["message"]) for c in fixed["conditions"]] == [
        ("True", "AdaptersAvailable", "No adapter of OpenModel m is left out")
    ]


def test_the_playground_shows_its_services_adapters_condition() -> None:
    entries = [record("sql", SQL_SOURCE)]
    svc = Service.from_dict(
        {**service_with(None).to_dict(), "status": with_adapters(service_with(None), {}, entries, MODEL, NOW)}
    )
    playground = playground_with(MODEL, "llamacpp")

    conditions = playground_status(playground, svc, NOW)["conditions"]
    (adapters_ready,) = [c for c in conditions if c["type"] == "AdaptersReady"]
    assert adapters_ready["status"] == "False"
    assert adapters_ready["message"].startswith("adapter sql (spec.adapters[0] of OpenModel m) is left out")
    assert all(
        c["type"] != "AdaptersReady" for c in playground_status(playground, service_with(None), NOW)["conditions"]
    )


def test_a_pod_that_loaded_the_adapter_from_another_source_does_not_count() -> None:
    # An old pod of the rollout that fixes the source still shows the old failure; the new source is not to blame.
    failing = pod("pg-0", loader_exit=3)
    now_loaded_from = {"sql": [env("ADAPTER_NAME", "sql"), env("MODEL_PATH", "loras/sql-v2.gguf")]}
    as_failed = {"sql": [env("ADAPTER_NAME", "sql")]}

    assert unusable_adapters([failing], PATHS, now_loaded_from) == {}
    assert list(unusable_adapters([failing], PATHS, as_failed)) == ["sql"]


def test_the_loader_env_an_adapter_is_fetched_with_names_its_source() -> None:
    envs = adapter_loader_envs(MODEL)

    assert list(envs) == ["sql", "chat"]
    assert env("ADAPTER_NAME", "sql") in envs["sql"]
    changed = model_with(adapter("sql", {"uri": "s3://b/loras/sql-v2.gguf"}), adapter("chat", CHAT_SOURCE))
    assert adapter_loader_envs(changed)["sql"] != envs["sql"]
    assert adapter_loader_envs(changed)["chat"] == envs["chat"]
