"""Why pods are not ready reaches the Playground: pods written by hand as kubelet and the scheduler would.

No kubelet runs here: the tests create the LeaderWorkerSet's pod and write its status through the status
subresource, the way kubelet reports a model loader that exits 3 and then backs off.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from llmaz.apis import resources as r
from llmaz.controllers.indexes import MODEL_POD_SELECTOR
from llmaz.runtime.client import Client
from llmaz.runtime.events import EVENTS
from llmaz.runtime.manager import Manager
from llmaz.runtime.resource import Resource
from llmaz_dev.testing.waiting import eventually

from .objects import conditions, get_or_none, open_model, playground
from .settling import events_flushed, reconciles, settled

SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
LOADER_MESSAGE = "NotFound: s3://models/qwen.gguf does not exist (NoSuchKey): fix the OpenModel's spec.source.uri"
FINDING = f"ModelLoaderFailed: pod pg-0, init container model-loader exited with code 3: {LOADER_MESSAGE}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unschedulable(message: str) -> dict[str, Any]:
    """The status kube-scheduler writes on a pod it cannot place, saying why."""
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    return {"phase": "Pending", "conditions": [{**condition, "lastTransitionTime": _now()}]}


def _pod(namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "initContainers": [{"name": "model-loader", "image": "loader:v1"}],
            "containers": [{"name": "model-runner", "image": "engine:v1"}],
        },
    }


def _container(name: str, image: str, state: dict[str, Any], last: dict[str, Any], ready: bool = False) -> Any:
    restarts = 1 if last else 0
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": ready,
        "restartCount": restarts,
        "state": state,
        "lastState": last,
    }


def _loader_crash_looping(restarts: int) -> dict[str, Any]:
    failed = {"exitCode": 3, "reason": "Error", "message": LOADER_MESSAGE, "startedAt": _now(), "finishedAt": _now()}
    loader = _container(
        "model-loader", "loader:v1", {"waiting": {"reason": "CrashLoopBackOff"}}, {"terminated": failed}
    )
    loader["restartCount"] = restarts
    runner = _container("model-runner", "engine:v1", {"waiting": {"reason": "PodInitializing"}}, {})
    return {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": _now()},
        ],
        "initContainerStatuses": [loader],
        "containerStatuses": [runner],
    }


def _running_ready() -> dict[str, Any]:
    done = {"exitCode": 0, "reason": "Completed", "startedAt": _now(), "finishedAt": _now()}
    loader = _container("model-loader", "loader:v1", {"terminated": done}, {})
    runner = _container("model-runner", "engine:v1", {"running": {"startedAt": _now()}}, {}, ready=True)
    return {
        "phase": "Running",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()},
            {"type": "Ready", "status": "True", "lastTransitionTime": _now()},
        ],
        "initContainerStatuses": [loader],
        "containerStatuses": [runner],
    }


async def _write_pod_status(client: Client, namespace: str, name: str, status: dict[str, Any]) -> None:
    pod = await client.get(r.PODS, name, namespace)
    pod["status"] = status
    await client.update_status(r.PODS, pod)


async def _progressing_message(client: Client, resource: Resource, namespace: str) -> str | None:
    obj = await client.get(resource, "pg", namespace)
    condition = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Progressing"), None)
    return str(condition["message"]) if condition else None


async def _warnings(client: Client, namespace: str, kind: str) -> list[dict[str, Any]]:
    events = (await client.list(EVENTS, namespace)).items
    return [e for e in events if e["type"] == "Warning" and e["regarding"].get("kind") == kind]


async def _started_playground(client: Client, namespace: str) -> str:
    # Pods carry the model name as a label value, at most 63 characters: the namespace's unique suffix keeps it short.
    model = f"qwen-{namespace.rsplit('-', 1)[-1]}"
    await client.create(r.OPEN_MODELS, open_model(model, uri="s3://models/qwen.gguf"))
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))
    await eventually(lambda: get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace))
    # Pods need their ServiceAccount (admission); no controller creates `default` here.
    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": "default", "namespace": namespace}}, namespace)
    return model


async def test_a_failing_model_loader_is_reported_once_and_the_status_recovers_when_it_succeeds(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = await _started_playground(client, namespace)
    await client.create(
        r.PODS, _pod(namespace, "pg-0", {"leaderworkerset.sigs.k8s.io/name": "pg", "llmaz.io/model-name": model})
    )
    await _write_pod_status(client, namespace, "pg-0", _loader_crash_looping(restarts=1))

    async def playground_says(message: str) -> bool:
        return await _progressing_message(client, r.PLAYGROUNDS, namespace) == message

    await eventually(lambda: playground_says(f"Waiting for inference Service ready: {FINDING}"))
    assert conditions(await client.get(r.PLAYGROUNDS, "pg", namespace)) == {"Progressing": ("True", "Pending")}
    service = await client.get(r.INFERENCE_SERVICES, "pg", namespace)
    assert conditions(service) == {"Progressing": ("True", "ServiceInProgress")}
    assert await _progressing_message(client, r.INFERENCE_SERVICES, namespace) == (
        f"Inference Service is progressing: {FINDING}"
    )

    async def one_warning_each() -> bool:
        # Raised, not returned: a timeout then reports what was there.
        found = {kind: await _warnings(client, namespace, kind) for kind in ("Playground", "Service")}
        assert all(len(events) == 1 for events in found.values()), {
            kind: [(e["reason"], e["note"], e.get("series")) for e in events] for kind, events in found.items()
        }
        return True

    await eventually(one_warning_each)
    for kind in ("Playground", "Service"):
        (event,) = await _warnings(client, namespace, kind)
        assert (event["reason"], event["note"], event["regarding"]["name"]) == ("ModelLoaderFailed", FINDING, "pg")

    # kubelet retrying the same failure changes the pod, not the finding: no new status, no new Event. The touch
    # makes the Playground reconcile again; the test asserts only once the manager has acted on both writes.
    statuses = {
        kind: (await client.get(resource, "pg", namespace))["status"]
        for kind, resource in (("Playground", r.PLAYGROUNDS), ("Service", r.INFERENCE_SERVICES))
    }
    reconciled = reconciles("playground")
    await _write_pod_status(client, namespace, "pg-0", _loader_crash_looping(restarts=2))
    await client.patch(r.PLAYGROUNDS, "pg", {"metadata": {"annotations": {"touched": "yes"}}}, namespace)
    await settled(manager, client, namespace, [(r.PODS, "pg-0"), (r.PLAYGROUNDS, "pg"), (r.INFERENCE_SERVICES, "pg")])
    assert reconciles("playground") > reconciled, "the touch did not make the Playground reconcile"
    await events_flushed(manager, client, namespace)
    for kind, resource in (("Playground", r.PLAYGROUNDS), ("Service", r.INFERENCE_SERVICES)):
        (event,) = await _warnings(client, namespace, kind)
        assert event.get("series") is None
        assert (await client.get(resource, "pg", namespace))["status"] == statuses[kind]

    # The object is uploaded: the retried loader succeeds and the engine becomes ready.
    await _write_pod_status(client, namespace, "pg-0", _running_ready())
    await eventually(lambda: playground_says("Waiting for inference Service ready"))
    assert await _progressing_message(client, r.INFERENCE_SERVICES, namespace) == "Inference Service is progressing"
    assert len(await _warnings(client, namespace, "Playground")) == 1


async def test_only_llmaz_model_pods_are_cached_and_an_unschedulable_one_is_explained(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = await _started_playground(client, namespace)
    # Carries the LeaderWorkerSet label but not llmaz's: not a model pod of this manager.
    await client.create(r.PODS, _pod(namespace, "foreign-0", {"leaderworkerset.sigs.k8s.io/name": "pg"}))
    await client.create(
        r.PODS, _pod(namespace, "pg-0", {"leaderworkerset.sigs.k8s.io/name": "pg", "llmaz.io/model-name": model})
    )
    await _write_pod_status(
        client, namespace, "pg-0", _unschedulable("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    )
    await _write_pod_status(client, namespace, "foreign-0", _loader_crash_looping(restarts=1))
    expected = "Unschedulable: pod pg-0: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."

    async def playground_says(message: str) -> bool:
        return await _progressing_message(client, r.PLAYGROUNDS, namespace) == message

    await eventually(lambda: playground_says(f"Waiting for inference Service ready: {expected}"))
    cached = manager.informers.informer_for(r.PODS, label_selector=MODEL_POD_SELECTOR).store
    assert cached.get(f"{namespace}/pg-0") is not None
    assert cached.get(f"{namespace}/foreign-0") is None
    pod_informers = [i for i in manager.informers.informers if i.name.startswith(str(r.PODS))]
    assert len(pod_informers) == 1, [i.name for i in pod_informers]

    # The pod goes away (the LeaderWorkerSet is scaled down or re-creates it): the finding goes with it.
    await client.delete(r.PODS, "pg-0", namespace)
    await eventually(lambda: playground_says("Waiting for inference Service ready"))


def _engine_args(service: dict[str, Any]) -> list[str]:
    args: list[str] = service["spec"]["workloadTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"]
    return args


def _loaders(lws: dict[str, Any]) -> list[str]:
    template = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    return [c["name"] for c in template.get("initContainers") or ()]


def _adapter_loader_failing(pod: dict[str, Any]) -> dict[str, Any]:
    """The adapter loader (second init container) exited 3 and backs off; the model's loader completed."""
    done = {"exitCode": 0, "reason": "Completed", "startedAt": _now(), "finishedAt": _now()}
    message = "adapter sql: NotFound: s3://loras/sql.gguf does not exist (NoSuchKey)"
    failed = {"exitCode": 3, "reason": "Error", "message": message, "startedAt": _now(), "finishedAt": _now()}
    loader, adapter_loader = (c["name"] for c in pod["spec"]["initContainers"][:2])
    return {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": _now()},
        ],
        "initContainerStatuses": [
            _container(loader, "loader:v1", {"terminated": done}, {}),
            _container(
                adapter_loader, "loader:v1", {"waiting": {"reason": "CrashLoopBackOff"}}, {"terminated": failed}
            ),
        ],
        "containerStatuses": [
            _container("model-runner", "engine:v1", {"waiting": {"reason": "PodInitializing"}}, {}),
        ],
    }


async def test_an_adapter_that_fails_for_good_is_left_out_until_its_source_changes(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"qwen-{namespace.rsplit('-', 1)[-1]}"
    document = open_model(model, uri="s3://models/qwen.gguf")
    document["spec"]["adapters"] = [
        {"name": "sql", "source": {"uri": "s3://loras/sql.gguf"}},
        {"name": "chat", "source": {"uri": "s3://loras/chat.gguf"}},
    ]
    await client.create(r.OPEN_MODELS, document)
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))
    lws = await eventually(lambda: get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace))
    assert _loaders(lws) == ["model-loader", "model-loader-adapter-0", "model-loader-adapter-1"]
    service = await client.get(r.INFERENCE_SERVICES, "pg", namespace)
    sql_module, chat_module = (
        "sql=/workspace/models/adapters--sql/sql.gguf",
        "chat=/workspace/models/adapters--chat/chat.gguf",
    )
    assert {sql_module, chat_module} <= set(_engine_args(service))

    # The pod as the LeaderWorkerSet would make it, its adapter loader failing as kubelet reports.
    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": "default", "namespace": namespace}}, namespace)
    template = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pg-0", "namespace": namespace, "labels": {**template["metadata"]["labels"],
                     "leaderworkerset.sigs.k8s.io/name": "pg"}},
        "spec": {**template["spec"], "automountServiceAccountToken": False},
    }  # fmt: skip
    pod = await client.create(r.PODS, pod, namespace)
    await _write_pod_status(client, namespace, "pg-0", _adapter_loader_failing(pod))

    async def left_out() -> dict[str, Any]:
        playground_obj = await client.get(r.PLAYGROUNDS, "pg", namespace)
        assert conditions(playground_obj).get("AdaptersReady") == ("False", "AdapterUnavailable"), playground_obj
        service_obj = await client.get(r.INFERENCE_SERVICES, "pg", namespace)
        assert sql_module not in _engine_args(service_obj)
        lws_obj = await client.get(r.LEADER_WORKER_SETS, "pg", namespace)
        assert _loaders(lws_obj) == ["model-loader", "model-loader-adapter-1"]
        return service_obj

    service = await eventually(left_out)
    (entry,) = service["status"]["unavailableAdapters"]
    assert entry == {
        "name": "sql",
        "source": {"uri": "s3://loras/sql.gguf"},
        "reason": "ModelLoaderFailed",
        "message": "ModelLoaderFailed: pod pg-0, init container model-loader-adapter-0 (adapter sql) exited with "
        "code 3: NotFound: s3://loras/sql.gguf does not exist (NoSuchKey)",
    }
    assert chat_module in _engine_args(service)

    async def warned() -> list[dict[str, Any]]:
        # Events are sent by the recorder after the status it reports, not with it.
        found = await _warnings(client, namespace, "Playground")
        return [e for e in found if e["reason"] == "AdapterUnavailable"]

    (warning,) = await eventually(warned, what="the AdapterUnavailable Warning Event")
    assert warning["note"].startswith(f"adapter sql (spec.adapters[0] of OpenModel {model}) is left out"), warning

    # A fixed source is tried again, although the old pod still shows the old failure.
    await client.patch(
        r.OPEN_MODELS,
        model,
        {"spec": {"adapters": [{**document["spec"]["adapters"][0], "source": {"uri": "s3://loras/sql-v2.gguf"}},
                               document["spec"]["adapters"][1]]}},
    )  # fmt: skip

    async def tried_again() -> bool:
        playground_obj = await client.get(r.PLAYGROUNDS, "pg", namespace)
        assert conditions(playground_obj).get("AdaptersReady") == ("True", "AdaptersAvailable"), playground_obj
        service_obj = await client.get(r.INFERENCE_SERVICES, "pg", namespace)
        assert "unavailableAdapters" not in service_obj["status"]
        assert "sql=/workspace/models/adapters--sql/sql-v2.gguf" in _engine_args(service_obj)
        lws_obj = await client.get(r.LEADER_WORKER_SETS, "pg", namespace)
        assert _loaders(lws_obj) == ["model-loader", "model-loader-adapter-0", "model-loader-adapter-1"]
        return True

    await eventually(tried_again)
    await settled(manager, client, namespace, [(r.PODS, "pg-0"), (r.INFERENCE_SERVICES, "pg")])
    assert "unavailableAdapters" not in (await client.get(r.INFERENCE_SERVICES, "pg", namespace))["status"]
