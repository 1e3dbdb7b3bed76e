"""Why a Service's pods are not ready: at most one finding, derived from the pods as read from the cache.

llmaz reported nothing about pods: a model loader that exits because the object does not exist, an engine in
CrashLoopBackOff or an image that cannot be pulled left the Playground `Progressing` forever. A finding names
the pod, the container and what kubelet or the scheduler said, so a reconciler can put it into the `Progressing`
message and record an Event.

Invariants:
- Deterministic: pods are taken in name order, a group's workers (LeaderWorkerSet worker index above 0) before
  every leader, and the first one with a finding wins; within a pod, scheduling comes first, then init containers
  and containers in the pod spec's order. A multi-host leader waits for its workers, so a worker's failure is
  the cause of its leader's (a leader that gave up waiting), and the finding names the worker pod as such.
- Ready pods, and pods being deleted, have no finding.
- A finding stays the same while the same failure repeats. A crash is read from the last termination
  (`state.terminated`, else `lastState.terminated`), which kubelet keeps through CrashLoopBackOff and the
  retry that follows, so the finding does not flicker with every restart; it goes away when the init container
  completes (exit code 0) or the container is ready. An image pull alternates between ErrImagePull and
  ImagePullBackOff, whose messages differ, so its finding names the image only.
- Messages are one line (the last non-empty line of a termination message: a log tail or a traceback ends
  with the error) and at most `MAX_DETAIL` characters of detail.
- A container loading an adapter (its env sets `ADAPTER_NAME`) is named with the adapter, whatever ended it (the
  loader's own termination message, or kubelet's: OOMKilled, an image it cannot pull).
- `unusable_adapters` finds the adapters that will not load as they are, in every pod that is not ready: a loader
  whose exit code says the source itself is wrong (`LOADER_EXITS_FOR_GOOD`; a transient failure, 5, is retried by
  kubelet instead), or an engine that exited with an adapter's path in its termination message (its last log
  lines, with `FallbackToLogsOnError`: llama.cpp logs `failed to load lora adapter '<path>'` when an adapter does
  not fit the base model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llmaz.apis import constants as c
from llmaz.apis.conditions import (
    REASON_CONTAINER_CRASH_LOOPING,
    REASON_CONTAINER_CREATE_FAILED,
    REASON_IMAGE_PULL_FAILED,
    REASON_MODEL_LOADER_FAILED,
)
from llmaz.apis.conditions import REASON_UNSCHEDULABLE as REASON_UNSCHEDULABLE  # the flavors' finding too
from llmaz.apis.conditions import finding_reason as finding_reason
from llmaz.apis.modelpath import mentions_path

MAX_DETAIL = 400
# The model loader's exit codes for a source that will not load however often it is retried: 2 bad
# configuration, 3 not found, 4 unauthorized (docs/model-loader.md).
LOADER_EXITS_FOR_GOOD = frozenset({2, 3, 4})
ELLIPSIS = "..."

# Kubelet's waiting reasons for images it cannot get.
_IMAGE_PULL_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "ErrImageInspect",
        "RegistryUnavailable",
        "SignatureValidationFailed",
    }
)
# Kubelet's waiting reasons for a container it cannot create (a missing ConfigMap key, a bad command, ...).
_CREATE_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
_CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PodFinding:
    """What keeps one pod from becoming ready; `message` is the one-line text for conditions and Events."""

    pod: str
    reason: str
    detail: str
    container: str | None = None
    init_container: bool = False
    exit_code: int | None = None
    adapter: str | None = None
    worker: bool = False

    @property
    def message(self) -> str:
        where = f"{'worker pod' if self.worker else 'pod'} {self.pod}"
        if self.container is not None:
            where += f", {'init container' if self.init_container else 'container'} {self.container}"
        if self.adapter is not None:
            where += f" (adapter {self.adapter})"
        if self.exit_code is not None:  # the detail reads on from the container: "... exited with code 3: ..."
            return f"{self.reason}: {where} {self.detail}"
        return f"{self.reason}: {where}: {self.detail}"


def one_line(text: str, limit: int = MAX_DETAIL) -> str:
    """The last non-empty line of `text`, stripped and cut to `limit` characters; `...` marks what was cut."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if len(lines) == 1 else f"{ELLIPSIS} {lines[-1]}"
    return line if len(line) <= limit else line[: limit - len(ELLIPSIS)].rstrip() + ELLIPSIS


def diagnose_pods(pods: Iterable[Obj]) -> PodFinding | None:
    """The finding of the first pod that has one: workers first, then leaders, each by name."""
    for pod in sorted(pods, key=lambda pod: (not _is_worker(pod), _name(pod))):
        finding = diagnose_pod(pod)
        if finding is not None:
            return finding
    return None


def _is_worker(pod: Obj) -> bool:
    """A LeaderWorkerSet worker: a pod of a group whose worker index is not the leader's 0."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(c.LWS_WORKER_INDEX_LABEL, "0") != "0")


def diagnose_pod(pod: Obj) -> PodFinding | None:
    """Why this pod is not ready, or None when it is ready, being deleted, or simply not there yet."""
    finding = _diagnose(pod)
    return replace(finding, worker=True) if finding is not None and _is_worker(pod) else finding


def _diagnose(pod: Obj) -> PodFinding | None:
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if metadata.get("deletionTimestamp") or _condition(status, "Ready").get("status") == "True":
        return None
    name = _name(pod)
    scheduled = _condition(status, "PodScheduled")
    if scheduled.get("status") == "False":
        detail = one_line(scheduled.get("message") or scheduled.get("reason") or "not scheduled")
        return PodFinding(name, REASON_UNSCHEDULABLE, detail)
    spec = pod.get("spec") or {}
    init_statuses = _by_name(status.get("initContainerStatuses"))
    for container in spec.get("initContainers") or ():
        container_status = init_statuses.get(container.get("name"))
        if container_status is not None:
            # A restartable init container (a sidecar) runs alongside the containers and is judged like them.
            sidecar = container.get("restartPolicy") == "Always"
            finding = _diagnose_container(name, container, container_status, init=True, runs_once=not sidecar)
            if finding is not None:
                return finding
    statuses = _by_name(status.get("containerStatuses"))
    for container in spec.get("containers") or ():
        container_status = statuses.get(container.get("name"))
        if container_status is not None:
            finding = _diagnose_container(name, container, container_status, init=False, runs_once=False)
            if finding is not None:
                return finding
    return None


def _diagnose_container(pod: str, container: Obj, status: Obj, *, init: bool, runs_once: bool) -> PodFinding | None:
    name = str(container.get("name"))
    adapter = _adapter(container)
    state = status.get("state") or {}
    waiting = state.get("waiting") or {}
    if waiting.get("reason") in _IMAGE_PULL_REASONS:
        image = status.get("image") or container.get("image") or ""
        detail = f'cannot pull image "{image}" (kubectl describe pod {pod} shows why)'
        return PodFinding(pod, REASON_IMAGE_PULL_FAILED, detail, name, init, adapter=adapter)
    if waiting.get("reason") in _CREATE_REASONS:
        detail = one_line(waiting.get("message") or waiting["reason"])
        return PodFinding(pod, REASON_CONTAINER_CREATE_FAILED, detail, name, init, adapter=adapter)
    terminated = state.get("terminated") or (status.get("lastState") or {}).get("terminated")
    if not terminated:
        return None
    exit_code = int(terminated.get("exitCode") or 0)
    if runs_once:
        # Its last run exited 0: it completed. Otherwise that exit says why it is being retried.
        if exit_code == 0:
            return None
        reason = REASON_MODEL_LOADER_FAILED if _is_model_loader(name) else REASON_CONTAINER_CRASH_LOOPING
    else:
        # A container that is not ready and last exited with an error, or keeps exiting at all.
        if status.get("ready") or (exit_code == 0 and waiting.get("reason") != _CRASH_LOOP_BACK_OFF):
            return None
        reason = REASON_CONTAINER_CRASH_LOOPING
    return PodFinding(pod, reason, _exit_detail(terminated, exit_code, adapter), name, init, exit_code, adapter)


def _exit_detail(terminated: Obj, exit_code: int, adapter: str | None) -> str:
    detail = f"exited with code {exit_code}"
    if terminated.get("reason") not in (None, "", "Error", "Completed"):
        detail += f" ({terminated['reason']})"
    message = one_line(terminated.get("message") or "")
    if adapter is not None:  # the loader names its adapter too; the finding already does
        message = message.removeprefix(f"adapter {adapter}: ")
    return f"{detail}: {message}" if message else detail


def _adapter(container: Obj) -> str | None:
    for env in container.get("env") or ():
        if env.get("name") == c.ENV_ADAPTER_NAME and env.get("value"):
            return str(env["value"])
    return None


def _is_model_loader(name: str) -> bool:
    loader = c.MODEL_LOADER_CONTAINER_NAME
    return name == loader or name.startswith(f"{loader}-")


def _name(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def _condition(status: Obj, type_: str) -> Obj:
    return next((cond for cond in status.get("conditions") or () if cond.get("type") == type_), {})


def _by_name(statuses: Iterable[Obj] | None) -> dict[str, Obj]:
    return {str(s.get("name")): s for s in statuses or ()}


def unusable_adapters(
    pods: Iterable[Obj], paths: Mapping[str, str], loaded_from: Mapping[str, Sequence[Obj]] | None = None
) -> dict[str, PodFinding]:
    """The adapters (of `paths`: adapter name -> the path the engine reads it from) that fail for good in some pod
    that is not ready, each with the first such finding (pods by name), in the order of `paths`.

    `loaded_from` (adapter name -> the env its loader has now: the source's coordinates) keeps out a pod that
    loaded an adapter from another source: an old pod of a rollout that fixes the adapter's source."""
    if not paths:
        return {}
    found: dict[str, PodFinding] = {}
    current = loaded_from or {}
    for pod in sorted(pods, key=_name):
        metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
        if metadata.get("deletionTimestamp") or _condition(status, "Ready").get("status") == "True":
            continue
        spec = pod.get("spec") or {}
        init_statuses = _by_name(status.get("initContainerStatuses"))
        findings: list[PodFinding | None] = []
        for container in spec.get("initContainers") or ():
            container_status = init_statuses.get(container.get("name"))
            if container_status is None or _adapter(container) is None:
                continue
            finding = _diagnose_container(_name(pod), container, container_status, init=True, runs_once=True)
            if finding is not None and finding.exit_code in LOADER_EXITS_FOR_GOOD:
                findings.append(finding)
        statuses = _by_name(status.get("containerStatuses"))
        for container in spec.get("containers") or ():
            findings.append(
                _engine_failed_on_adapter(_name(pod), container, statuses.get(container.get("name")), paths)
            )
        for finding in findings:
            adapter = finding.adapter if finding is not None else None
            if finding is not None and adapter is not None and _loaded_as_now(spec, adapter, current.get(adapter)):
                found.setdefault(adapter, finding)
    return {name: found[name] for name in paths if name in found}


def _loaded_as_now(spec: Obj, adapter: str, env: Sequence[Obj] | None) -> bool:
    """Whether the pod's loader of `adapter` has `env` (a pod without one, or no `env` to compare: yes)."""
    loader = next((c for c in spec.get("initContainers") or () if _adapter(c) == adapter), None)
    if loader is None or not env:
        return True
    return all(entry in (loader.get("env") or ()) for entry in env)


def _engine_failed_on_adapter(
    pod: str, container: Obj, status: Obj | None, paths: Mapping[str, str]
) -> PodFinding | None:
    state = (status or {}).get("state") or {}
    terminated = state.get("terminated") or ((status or {}).get("lastState") or {}).get("terminated") or {}
    exit_code = int(terminated.get("exitCode") or 0)
    if exit_code == 0:
        return None
    lines = [line.strip() for line in str(terminated.get("message") or "").splitlines() if line.strip()]
    for index in range(len(lines) - 1, -1, -1):
        for adapter, path in paths.items():
            if mentions_path(lines[index], path):
                cause = _cause(lines[:index]) or lines[index]
                detail = f"exited with code {exit_code}: {one_line(cause)}"
                return PodFinding(
                    pod, REASON_CONTAINER_CRASH_LOOPING, detail, str(container.get("name")), False, exit_code, adapter
                )
    return None


def _cause(before: list[str]) -> str | None:
    """The engine's reason, logged just before the line naming the adapter: the nearest of the 3 lines before it
    that speaks of LoRA."""
    return next((line for line in reversed(before[-3:]) if "lora" in line.lower()), None)
