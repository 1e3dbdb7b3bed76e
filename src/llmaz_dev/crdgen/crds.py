"""The four llmaz CustomResourceDefinitions, and the Gateway API Inference Extension's InferencePool, generated
from the API models.

Names, scopes, short names, printer columns and subresources are part of the llmaz contract (kubectl output,
`kubectl scale`, HPA targets) and match llmaz exactly. The openmodels CRD carries no conversion stanza: there is
one version, so a conversion webhook would never be called.

`CRDS` go to `config/crd/bases` (installed with llmaz); `GIE_CRDS` to `config/gie` (installed only on clusters
that lack them: another project defines them). Both go to the chart's `crds/`. A group under `k8s.io` needs the
`api-approved.kubernetes.io` annotation or the API server refuses the CRD; ours says it is an unapproved copy.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from llmaz.apis import constants as c
from llmaz.apis.core_v1alpha1 import OpenModel
from llmaz.apis.gie_v1 import InferencePool
from llmaz.apis.inference_v1alpha1 import BackendRuntime, Playground, Service
from llmaz_dev.crdgen import upstream
from llmaz_dev.crdgen.schema import model_schema

_API_VERSION_DOC = (
    "APIVersion defines the versioned schema of this representation of an object.\n"
    "Servers should convert recognized schemas to the latest internal value, and\n"
    "may reject unrecognized values.\n"
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
_KIND_DOC = (
    "Kind is a string value representing the REST resource this object represents.\n"
    "Servers may infer this from the endpoint the client submits requests to.\n"
    "Cannot be updated.\n"
    "In CamelCase.\n"
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)
_AVAILABLE_REASON = ".status.conditions[?(@.type=='Available')].reason"


@dataclass(frozen=True)
class CrdSpec:
    model: type[BaseModel]
    group: str
    plural: str
    singular: str
    short_name: str | None
    namespaced: bool
    printer_columns: list[dict[str, str]] = field(default_factory=list)
    scalable: bool = False
    version: str = c.VERSION
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.model.__name__

    @property
    def file_name(self) -> str:
        return f"{self.group}_{self.plural}.yaml"


def _column(name: str, type_: str, path: str, description: str = "") -> dict[str, str]:
    column = {"name": name, "type": type_, "jsonPath": path}
    return {**column, "description": description} if description else column


_AGE = _column("AGE", "date", ".metadata.creationTimestamp")

CRDS: tuple[CrdSpec, ...] = (
    CrdSpec(
        OpenModel,
        c.CORE_GROUP,
        "openmodels",
        "openmodel",
        "om",
        namespaced=False,
        printer_columns=[
            _column("OWNEDBY", "string", ".spec.ownedBy", "Owner of the model"),
            _AGE,
            _column("MODELHUB", "string", ".spec.source.modelHub.name", "Model hub of the model"),
            _column("MODELID", "string", ".spec.source.modelHub.modelID", "Model ID in the model hub"),
            _column("URI", "string", ".spec.source.uri", "URI of the model"),
        ],
    ),
    CrdSpec(BackendRuntime, c.INFERENCE_GROUP, "backendruntimes", "backendruntime", "br", namespaced=False),
    CrdSpec(
        Playground,
        c.INFERENCE_GROUP,
        "playgrounds",
        "playground",
        "pl",
        namespaced=True,
        scalable=True,
        printer_columns=[
            _column("MODEL", "string", ".spec.modelClaim.modelName", "Model used in the Playground"),
            _column("REPLICAS", "integer", ".status.replicas", "Current number of replicas"),
            _column("STATUS", "string", _AVAILABLE_REASON, "Current status (Available/Progressing)"),
            _column("AGE", "date", ".metadata.creationTimestamp", "Time since creation"),
        ],
    ),
    CrdSpec(
        Service,
        c.INFERENCE_GROUP,
        "services",
        "service",
        "isvc",
        namespaced=True,
        scalable=True,
        printer_columns=[
            _column("NAME", "string", ".metadata.name", "Name of the Inference Service"),
            _column("REPLICAS", "integer", ".status.replicas", "Current number of replicas"),
            _column("STATUS", "string", _AVAILABLE_REASON, "Current status (Available/Progressing)"),
            _column("AGE", "date", ".metadata.creationTimestamp", "Time since creation"),
        ],
    ),
)


GIE_APPROVAL = (
    "unapproved, llmaz's copy of the Gateway API Inference Extension's InferencePool v1 schema: "
    "https://github.com/kubernetes-sigs/gateway-api-inference-extension"
)
GIE_CRDS: tuple[CrdSpec, ...] = (
    CrdSpec(
        InferencePool,
        c.GIE_GROUP,
        "inferencepools",
        "inferencepool",
        None,
        namespaced=True,
        version=c.GIE_VERSION,
        annotations={"api-approved.kubernetes.io": GIE_APPROVAL},
    ),
)


def root_schema(spec: CrdSpec) -> dict[str, Any]:
    schema = model_schema(spec.model, upstream.resolve, skip=frozenset({"apiVersion", "kind", "metadata"}))
    properties = schema["properties"]
    properties["apiVersion"] = {"description": _API_VERSION_DOC, "type": "string"}
    properties["kind"] = {"description": _KIND_DOC, "type": "string"}
    properties["metadata"] = {"type": "object"}
    return {"description": inspect.cleandoc(spec.model.__doc__ or spec.kind), **schema}


def build_crd(spec: CrdSpec) -> dict[str, Any]:
    subresources: dict[str, Any] = {"status": {}}
    if spec.scalable:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    version: dict[str, Any] = {
        "name": spec.version,
        "schema": {"openAPIV3Schema": root_schema(spec)},
        "served": True,
        "storage": True,
        "subresources": subresources,
    }
    if spec.printer_columns:
        version["additionalPrinterColumns"] = spec.printer_columns
    metadata: dict[str, Any] = {"name": f"{spec.plural}.{spec.group}"}
    if spec.annotations:
        metadata["annotations"] = dict(spec.annotations)
    names: dict[str, Any] = {
        "kind": spec.kind,
        "listKind": f"{spec.kind}List",
        "plural": spec.plural,
        "singular": spec.singular,
    }
    if spec.short_name:
        names["shortNames"] = [spec.short_name]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": spec.group,
            "names": names,
            "scope": "Namespaced" if spec.namespaced else "Cluster",
            "versions": [version],
        },
    }


class _CrdDumper(yaml.CSafeDumper):
    """Multi-line descriptions as literal blocks, as controller-gen writes them."""


def _represent_str(dumper: yaml.CSafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_CrdDumper.add_representer(str, _represent_str)


def render(crd: dict[str, Any]) -> str:
    body = yaml.dump(
        crd, Dumper=_CrdDumper, sort_keys=True, width=1_000_000, allow_unicode=True, default_flow_style=False
    )
    return "---\n" + body


def rendered_crds(specs: tuple[CrdSpec, ...] = CRDS) -> dict[str, str]:
    """File name -> YAML text of every CRD of `specs` (default: llmaz's), exactly as `make manifests` writes them."""
    return {spec.file_name: render(build_crd(spec)) for spec in specs}


def write(out_dir: Path, specs: tuple[CrdSpec, ...] = CRDS) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in rendered_crds(specs).items():
        path = out_dir / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    return written
