"""Why a Service's pods are not ready: pod statuses as kubelet and the scheduler write them -> one finding."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.controllers.builders import PodFinding, diagnose_pod, diagnose_pods, finding_reason
from llmaz.controllers.builders.diagnosis import MAX_DETAIL, one_line

LOADER_MESSAGE = "NotFound: s3://models/qwen.gguf does not exist (NoSuchKey): fix the OpenModel's spec.source.uri"


def pod(
    name: str = "pg-0",
    *,
    init: list[dict[str, Any]] | None = None,
    main: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    init_specs: list[dict[str, Any]] | None = None,
    deleting: bool = False,
    worker_index: str | None = None,
) -> dict[str, Any]:
    """A model pod: a model-loader init container and a model-runner container, with the given statuses; with a
    `worker_index`, a pod of a LeaderWorkerSet group (0 for its leader)."""
    labels = {"leaderworkerset.sigs.k8s.io/name": "pg"}
    if worker_index is not None:
        labels["leaderworkerset.sigs.k8s.io/worker-index"] = worker_index
    metadata: dict[str, Any] = {"name": name, "namespace": "ns", "labels": labels}
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-02T03:04:05Z"
    status: dict[str, Any] = {"phase": "Pending", "conditions": conditions or []}
    if init is not None:
        status["initContainerStatuses"] = init
    if main is not None:
        status["containerStatuses"] = main
    return {
        "metadata": metadata,
        "spec": {
            "initContainers": init_specs or [{"name": "model-loader", "image": "loader:v1"}],
            "containers": [{"name": "model-runner", "image": "vllm/vllm-openai:v0.6.0"}],
        },
        "status": status,
    }


def terminated(exit_code: int, message: str = "", reason: str = "Error") -> dict[str, Any]:
    state: dict[str, Any] = {"exitCode": exit_code, "reason": reason}
    if message:
        state["message"] = message
    return {"terminated": state}


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {"waiting": {"reason": reason, "message": message} if message else {"reason": reason}}


RUNNING = {"running": {"startedAt": "2025-01-02T03:04:05Z"}}


def container(name: str, state: dict[str, Any], last: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"name": name, "state": state, "lastState": last or {}, "ready": False, **extra}
    status.setdefault("image", "vllm/vllm-openai:v0.6.0" if name == "model-runner" else "loader:v1")
    return status


def loader(state: dict[str, Any], last: dict[str, Any] | None = None) -> dict[str, Any]:
    return container("model-loader", state, last)


def runner(state: dict[str, Any], last: dict[str, Any] | None = None, ready: bool = False) -> dict[str, Any]:
    return container("model-runner", state, last, ready=ready)


INITIALIZING = runner(waiting("PodInitializing"))
LOADER_DONE = loader(terminated(0, reason="Completed"))
READY = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]
SCHEDULED = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]

LOADER_FAILED = PodFinding(
    "pg-0", "ModelLoaderFailed", f"exited with code 3: {LOADER_MESSAGE}", "model-loader", True, 3
)

CASES: list[tuple[str, dict[str, Any], PodFinding | None]] = [
    (
        "the loader exited 3 with its termination message",
        pod(init=[loader(terminated(3, LOADER_MESSAGE))], main=[INITIALIZING], conditions=SCHEDULED),
        LOADER_FAILED,
    ),
    (
        "the loader in CrashLoopBackOff keeps its last termination",
        pod(
            init=[loader(waiting("CrashLoopBackOff", "back-off 20s"), terminated(3, LOADER_MESSAGE))],
            main=[INITIALIZING],
            conditions=SCHEDULED,
        ),
        LOADER_FAILED,
    ),
    (
        "the loader being retried after a failure still reports that failure",
        pod(init=[loader(RUNNING, terminated(3, LOADER_MESSAGE))], main=[INITIALIZING], conditions=SCHEDULED),
        LOADER_FAILED,
    ),
    (
        "a loader running for the first time is no finding",
        pod(init=[loader(RUNNING)], main=[INITIALIZING], conditions=SCHEDULED),
        None,
    ),
    (
        "a loader that completed after failing is no finding",
        pod(init=[loader(terminated(0, reason="Completed"), terminated(3, LOADER_MESSAGE))], conditions=SCHEDULED),
        None,
    ),
    (
        "the engine crash-looping, with its exit code and message",
        pod(
            init=[LOADER_DONE],
            main=[runner(waiting("CrashLoopBackOff"), terminated(1, "CUDA out of memory"))],
            conditions=SCHEDULED,
        ),
        PodFinding("pg-0", "ContainerCrashLooping", "exited with code 1: CUDA out of memory", "model-runner", False, 1),
    ),
    (
        "an engine killed for memory names the kill",
        pod(init=[LOADER_DONE], main=[runner(RUNNING, terminated(137, reason="OOMKilled"))], conditions=SCHEDULED),
        PodFinding("pg-0", "ContainerCrashLooping", "exited with code 137 (OOMKilled)", "model-runner", False, 137),
    ),
    (
        "an engine that keeps exiting 0 is crash-looping too",
        pod(
            init=[LOADER_DONE],
            main=[runner(waiting("CrashLoopBackOff"), terminated(0, reason="Completed"))],
            conditions=SCHEDULED,
        ),
        PodFinding("pg-0", "ContainerCrashLooping", "exited with code 0", "model-runner", False, 0),
    ),
    (
        "an engine that crashed once and is ready again is no finding",
        pod(
            init=[LOADER_DONE],
            main=[runner(RUNNING, terminated(1, "boom"), ready=True)],
            conditions=[{"type": "PodScheduled", "status": "True"}],
        ),
        None,
    ),
    (
        "an image pull back-off names the image",
        pod(
            init=[LOADER_DONE],
            main=[runner(waiting("ImagePullBackOff", 'Back-off pulling image "vllm/vllm-openai:v0.6.0"'))],
            conditions=SCHEDULED,
        ),
        PodFinding(
            "pg-0",
            "ImagePullFailed",
            'cannot pull image "vllm/vllm-openai:v0.6.0" (kubectl describe pod pg-0 shows why)',
            "model-runner",
        ),
    ),
    (
        "an image pull error reads the same as its back-off, so they do not alternate",
        pod(
            init=[LOADER_DONE],
            main=[runner(waiting("ErrImagePull", "rpc error: code = NotFound desc = failed to pull"))],
            conditions=SCHEDULED,
        ),
        PodFinding(
            "pg-0",
            "ImagePullFailed",
            'cannot pull image "vllm/vllm-openai:v0.6.0" (kubectl describe pod pg-0 shows why)',
            "model-runner",
        ),
    ),
    (
        "the loader's own image cannot be pulled",
        pod(init=[loader(waiting("ErrImagePull", "not found"))], main=[INITIALIZING], conditions=SCHEDULED),
        PodFinding(
            "pg-0",
            "ImagePullFailed",
            'cannot pull image "loader:v1" (kubectl describe pod pg-0 shows why)',
            "model-loader",
            True,
        ),
    ),
    (
        "a container kubelet cannot create says why",
        pod(
            init=[LOADER_DONE],
            main=[runner(waiting("CreateContainerConfigError", 'secret "hf" not found'))],
            conditions=SCHEDULED,
        ),
        PodFinding("pg-0", "ContainerCreateFailed", 'secret "hf" not found', "model-runner"),
    ),
    (
        "an unschedulable pod says what blocks it",
        pod(
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                    "lastTransitionTime": "2024-01-01T00:00:00Z",
                }
            ]
        ),
        PodFinding("pg-0", "Unschedulable", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
    ),
    (
        "a ready pod is no finding",
        pod(init=[LOADER_DONE], main=[runner(RUNNING, ready=True)], conditions=READY),
        None,
    ),
    (
        "a pod not yet scheduled or started is no finding",
        pod(),
        None,
    ),
    (
        "a pod being deleted is no finding",
        pod(init=[loader(terminated(3, LOADER_MESSAGE))], conditions=SCHEDULED, deleting=True),
        None,
    ),
    (
        "a user init container before the loader is reported by its own name",
        pod(
            init=[container("setup", terminated(2, "bad config")), loader(waiting("PodInitializing"))],
            init_specs=[{"name": "setup", "image": "busybox"}, {"name": "model-loader", "image": "loader:v1"}],
            conditions=SCHEDULED,
        ),
        PodFinding("pg-0", "ContainerCrashLooping", "exited with code 2: bad config", "setup", True, 2),
    ),
    (
        "the loader of a second model is a model loader too",
        pod(
            init=[LOADER_DONE, container("model-loader-1", terminated(4, "Unauthorized: set HF_TOKEN"))],
            init_specs=[{"name": "model-loader", "image": "l"}, {"name": "model-loader-1", "image": "l"}],
            conditions=SCHEDULED,
        ),
        PodFinding(
            "pg-0", "ModelLoaderFailed", "exited with code 4: Unauthorized: set HF_TOKEN", "model-loader-1", True, 4
        ),
    ),
    (
        "a sidecar that keeps crashing is named as an init container",
        pod(
            init=[container("proxy", waiting("CrashLoopBackOff"), terminated(1, "bad flag"))],
            init_specs=[{"name": "proxy", "image": "p", "restartPolicy": "Always"}],
            main=[runner(RUNNING)],
            conditions=SCHEDULED,
        ),
        PodFinding("pg-0", "ContainerCrashLooping", "exited with code 1: bad flag", "proxy", True, 1),
    ),
    (
        "a sidecar that crashed once and runs ready is no finding",
        pod(
            init=[container("proxy", RUNNING, terminated(1, "boom"), ready=True)],
            init_specs=[{"name": "proxy", "image": "p", "restartPolicy": "Always"}],
            main=[runner(RUNNING)],
            conditions=SCHEDULED,
        ),
        None,
    ),
]


@pytest.mark.parametrize(("case", "obj", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_pod_yields_the_expected_finding(case: str, obj: dict[str, Any], expected: PodFinding | None) -> None:
    assert diagnose_pod(obj) == expected


def test_finding_messages_name_the_reason_pod_container_and_what_was_said() -> None:
    assert LOADER_FAILED.message == (
        f"ModelLoaderFailed: pod pg-0, init container model-loader exited with code 3: {LOADER_MESSAGE}"
    )
    unschedulable = PodFinding("pg-0", "Unschedulable", "0/3 nodes are available")
    assert unschedulable.message == "Unschedulable: pod pg-0: 0/3 nodes are available"
    pull = PodFinding("pg-0", "ImagePullFailed", 'cannot pull image "x"', "model-runner")
    assert pull.message == 'ImagePullFailed: pod pg-0, container model-runner: cannot pull image "x"'


def test_the_reason_is_read_back_from_a_finding_message() -> None:
    assert finding_reason(LOADER_FAILED.message) == "ModelLoaderFailed"
    assert finding_reason("something else: entirely") == "PodsNotReady"


def test_several_failing_pods_give_the_first_by_name_whatever_their_order() -> None:
    failing = [
        pod("pg-1", init=[loader(terminated(3, "NotFound: second"))], conditions=SCHEDULED),
        pod("pg-0-1", main=[runner(waiting("ImagePullBackOff"))], init=[LOADER_DONE], conditions=SCHEDULED),
        pod("pg-0", init=[LOADER_DONE], main=[runner(RUNNING, ready=True)], conditions=READY),
    ]
    for pods in (failing, failing[::-1]):
        finding = diagnose_pods(pods)
        assert finding is not None
        assert (finding.pod, finding.reason) == ("pg-0-1", "ImagePullFailed")


WAITED_TOO_LONG = "worker pg-0-1.pg.ns:50052 is not accepting connections after 300 s"


def test_a_workers_finding_comes_before_its_leaders_and_names_it_as_the_worker_pod() -> None:
    # The leader gave up waiting for its worker, whose image cannot be pulled: the worker is the cause.
    leader = pod(
        "pg-0",
        init=[LOADER_DONE],
        main=[runner(terminated(1, WAITED_TOO_LONG))],
        conditions=SCHEDULED,
        worker_index="0",
    )
    worker = pod(
        "pg-0-1",
        init=[LOADER_DONE],
        main=[container("model-runner", waiting("ErrImageNeverPull"), image="llmaz.local/missing:dev")],
        conditions=SCHEDULED,
        worker_index="1",
    )
    other_leader = pod("pg-1", init=[loader(terminated(3, "NotFound: x"))], conditions=SCHEDULED, worker_index="0")
    for pods in ([leader, worker, other_leader], [other_leader, leader, worker]):
        finding = diagnose_pods(pods)
        assert finding is not None
        assert finding.message == (
            "ImagePullFailed: worker pod pg-0-1, container model-runner: "
            'cannot pull image "llmaz.local/missing:dev" (kubectl describe pod pg-0-1 shows why)'
        )


@pytest.mark.parametrize(
    ("worker_index", "where"), [("1", "worker pod pg-0-1"), ("0", "pod pg-0-1"), (None, "pod pg-0-1")]
)
def test_only_a_pod_with_a_worker_index_above_zero_is_named_a_worker(worker_index: str | None, where: str) -> None:
    unscheduled = [{"type": "PodScheduled", "status": "False", "message": "0/1 nodes are available"}]
    finding = diagnose_pod(pod("pg-0-1", conditions=unscheduled, worker_index=worker_index))
    assert finding is not None
    assert finding.message == f"Unschedulable: {where}: 0/1 nodes are available"


def test_a_leader_is_named_when_its_workers_are_fine() -> None:
    gave_up = [runner(terminated(1, WAITED_TOO_LONG))]
    leader = pod("pg-0", init=[LOADER_DONE], main=gave_up, conditions=SCHEDULED, worker_index="0")
    worker = pod("pg-0-1", init=[LOADER_DONE], main=[runner(RUNNING)], conditions=SCHEDULED, worker_index="1")
    finding = diagnose_pods([worker, leader])
    assert finding is not None
    crashed = "ContainerCrashLooping: pod pg-0, container model-runner exited with code 1"
    assert finding.message == f"{crashed}: {WAITED_TOO_LONG}"


def test_no_pods_or_only_ready_pods_give_no_finding() -> None:
    assert diagnose_pods([]) is None
    assert diagnose_pods([pod(init=[LOADER_DONE], main=[runner(RUNNING, ready=True)], conditions=READY)]) is None


def test_a_long_multi_line_termination_message_is_trimmed_to_its_last_line() -> None:
    traceback = "Traceback (most recent call last):\n  File x\n\nValueError: " + "y" * 1000 + "\n\n"
    obj = pod(init=[LOADER_DONE], main=[runner(waiting("CrashLoopBackOff"), terminated(1, traceback))])
    finding = diagnose_pod(obj)
    assert finding is not None
    assert "\n" not in finding.message
    assert finding.detail.startswith("exited with code 1: ... ValueError: yyy")
    assert finding.detail.endswith("...")
    assert len(finding.detail) <= len("exited with code 1: ") + MAX_DETAIL


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("one line", 400, "one line"),
        ("  padded  \n", 400, "padded"),
        ("first\nsecond\n", 400, "... second"),
        ("", 400, ""),
        ("\n \n", 400, ""),
        ("x" * 20, 10, "x" * 7 + "..."),
        ("x" * 10, 10, "x" * 10),
    ],
)
def test_one_line_keeps_the_last_line_within_the_limit(text: str, limit: int, expected: str) -> None:
    assert one_line(text, limit) == expected
