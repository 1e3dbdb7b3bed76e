"""How model pods are confined: the security context, service-account token and loader limits of every pod a
LeaderWorkerSet renders (`harden`), from the global config (`PodOptions`).

With `model-pod-security: restricted` (the default), each pod template gets what it does not set itself:
- the pod: `automountServiceAccountToken: false` (no engine or loader calls the Kubernetes API) and the seccomp
  profile `RuntimeDefault` (added to the pod's securityContext when it names no profile);
- the model loaders (this project's image runs as 65532): `runAsNonRoot`, no privilege escalation, every capability
  dropped;
- each `model-runner` container: no privilege escalation, every capability dropped. Not `runAsNonRoot`: the
  engines' published images (vLLM, SGLang, TGI, ollama, TensorRT-LLM, llama.cpp's) run as root, and root keeps
  its own files without capabilities.
A container's securityContext the template sets is kept as written, and so are the pod's seccomp profile and token
setting. `model-pod-security: none` renders pods as llmaz did (for a switch from llmaz without a rollout, or a
loader image that runs as root).

Whatever the mode, `model-loader-resources` become the loaders' resources and `model-volume-size-limit` the
`model-volume` emptyDir's `sizeLimit`, when set (both unset by default, as in llmaz).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from llmaz.controllers.builders.merge import json_copy

RESTRICTED: Final = "restricted"
NONE: Final = "none"
SECURITY_MODES: Final = (RESTRICTED, NONE)

_NO_ESCALATION: Final = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
LOADER_SECURITY_CONTEXT: Final = {"runAsNonRoot": True, **_NO_ESCALATION}
RUNNER_SECURITY_CONTEXT: Final = dict(_NO_ESCALATION)
RUNTIME_DEFAULT_SECCOMP: Final = {"type": "RuntimeDefault"}


@dataclass(frozen=True, slots=True)
class PodOptions:
    """The global config's say in every model pod (see the module docstring)."""

    security: str = RESTRICTED
    loader_resources: dict[str, Any] | None = None
    """A ResourceRequirements (`requests`, `limits`) for each model-loader container; None leaves them unset."""
    model_volume_size_limit: str | None = None
    """The `model-volume` emptyDir's sizeLimit (a quantity); None leaves it unbounded."""


def loader_fields(options: PodOptions) -> dict[str, Any]:
    """What a model-loader container gets besides its name, image, env and mount."""
    fields: dict[str, Any] = {}
    if options.loader_resources:
        fields["resources"] = json_copy(options.loader_resources)
    if options.security == RESTRICTED:
        fields["securityContext"] = json_copy(LOADER_SECURITY_CONTEXT)
    return fields


def harden(template: dict[str, Any], options: PodOptions, runner_name: str) -> None:
    """The pod-level settings and the runners' security context of `template` (a pod template the caller owns)."""
    if options.security != RESTRICTED:
        return
    spec = template.setdefault("spec", {})
    spec.setdefault("automountServiceAccountToken", False)
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    spec["securityContext"].setdefault("seccompProfile", dict(RUNTIME_DEFAULT_SECCOMP))
    for container in spec.get("containers") or []:
        if container.get("name") == runner_name and container.get("securityContext") is None:
            container["securityContext"] = json_copy(RUNNER_SECURITY_CONTEXT)
