"""Every sample in config/samples builds into apply-ready objects: deterministic, clean, valid list-maps, and with
the loader writing exactly where the engine looks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz.apis import BackendRuntime, OpenModel, Playground, Service
from llmaz.apis.modelpath import loader_target
from llmaz.controllers.builders import (
    build_hpa,
    build_lb_service,
    build_leader_worker_set,
    build_service,
    main_first,
    playground_model_refs,
    service_model_refs,
    skip_model_loader,
)
from llmaz.controllers.builders.models import backend_name

from .factories import LOADER_IMAGE, NAMESPACE, PLAYGROUND_UID, REPO, SERVICE_UID, backend, documents

SAMPLES = sorted(p.name for p in (REPO / "config" / "samples").glob("*.yaml") if p.name != "kustomization.yaml")
LIST_MAP_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "env": "name", "ports": None}
# The kinds a sample may hold: llmaz's own, built here into what the controllers apply (OpenModels are read by the
# Playgrounds and Services claiming them), and the Kubernetes kinds the samples of llmaz-gateway's features need,
# which nothing here builds: each is checked by a test of its own in test_gateway_samples.py (a Secret is parsed by
# the gateway's own API key parser; a Namespace is one the sample's objects go to). A kind in neither is an error,
# never skipped.
BUILT_KINDS = frozenset({"OpenModel", "Playground", "Service"})
CHECKED_KINDS = frozenset({"Secret", "Namespace"})


def build_all(sample: str) -> list[dict[str, Any]]:
    """Every object the controllers would apply for one sample file (Playground -> Service -> LWS, -lb, HPA)."""
    docs = documents(f"config/samples/{sample}")
    unknown = sorted({d["kind"] for d in docs} - BUILT_KINDS - CHECKED_KINDS)
    assert not unknown, f"{sample}: no test builds or checks kind {unknown}: add it to BUILT_KINDS or CHECKED_KINDS"
    models = {d["metadata"]["name"]: OpenModel.from_dict(d) for d in docs if d["kind"] == "OpenModel"}
    built: list[dict[str, Any]] = []
    for doc in docs:
        if doc["kind"] not in BUILT_KINDS:
            continue
        doc["metadata"].setdefault("namespace", NAMESPACE)
        if doc["kind"] == "Playground":
            doc["metadata"]["uid"] = PLAYGROUND_UID
            pg = Playground.from_dict(doc)
            runtime: BackendRuntime = backend(backend_name(pg))
            ordered = main_first([(ref, models[ref.name]) for ref in playground_model_refs(pg)])
            service_cr = build_service(pg, ordered, runtime)
            built += [service_cr, *([hpa] if (hpa := build_hpa(pg, runtime)) else [])]
            built += build_from_service(
                {**service_cr, "metadata": {**service_cr["metadata"], "uid": SERVICE_UID}}, models
            )
        elif doc["kind"] == "Service":
            doc["metadata"]["uid"] = SERVICE_UID
            built += build_from_service(doc, models)
    return built


def build_from_service(doc: dict[str, Any], models: dict[str, OpenModel]) -> list[dict[str, Any]]:
    svc = Service.from_dict(doc)
    ordered = main_first([(ref, models[ref.name]) for ref in service_model_refs(svc)])
    return [build_leader_worker_set(svc, ordered, LOADER_IMAGE), build_lb_service(svc, ordered)]


def walk(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from walk(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, f"{path}[{index}]")


def build_every_sample_in_a_process(hash_seed: str) -> str:
    """The JSON of every sample's objects, built by a fresh interpreter with the given PYTHONHASHSEED."""
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from builders.test_samples import SAMPLES, build_all; "
        "print(json.dumps({sample: build_all(sample) for sample in SAMPLES}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(Path(__file__).resolve().parents[1])],
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return result.stdout.strip()


def test_every_sample_builds_into_identical_json_whatever_the_hash_seed() -> None:
    # Set and dict iteration orders of str keys change with the hash seed, and a builder that leaked one into
    # its output would differ between two manager processes (spurious applies, rollouts). Two builds in one
    # process share a seed and could never show it.
    here = {sample: build_all(sample) for sample in SAMPLES}
    for sample, objects in here.items():
        serving = [d for d in documents(f"config/samples/{sample}") if d["kind"] in ("Playground", "Service")]
        assert len(objects) >= 2 * len(serving), f"{sample}: {len(serving)} Playgrounds/Services built {objects}"
    assert build_every_sample_in_a_process("1") == json.dumps(here)
    assert build_every_sample_in_a_process("4242") == json.dumps(here)


@pytest.mark.parametrize("sample", SAMPLES)
def test_built_objects_have_no_nulls_and_no_creation_timestamps(sample: str) -> None:
    for obj in build_all(sample):
        for path, value in walk(obj):
            assert value is not None, f"null at {obj['kind']}{path}"
            assert not path.endswith(".creationTimestamp"), f"creationTimestamp at {obj['kind']}{path}"


def pod_specs(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    templates = obj.get("spec", {}).get("leaderWorkerTemplate") or obj.get("spec", {}).get("workloadTemplate") or {}
    for key in ("leaderTemplate", "workerTemplate"):
        if key in templates:
            yield templates[key]["spec"]


@pytest.mark.parametrize("sample", SAMPLES)
def test_built_pod_lists_never_repeat_a_list_map_key(sample: str) -> None:
    for obj in build_all(sample):
        for pod in pod_specs(obj):
            for field in ("containers", "initContainers", "volumes"):
                names = [item["name"] for item in pod.get(field, [])]
                assert len(names) == len(set(names)), f"{sample}: duplicate {field} {names}"
            for container in pod.get("containers", []) + pod.get("initContainers", []):
                env_names = [e["name"] for e in container.get("env", [])]
                assert len(env_names) == len(set(env_names)), f"{sample}: duplicate env {env_names}"
                mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
                assert len(mounts) == len(set(mounts)), f"{sample}: duplicate mounts {mounts}"
                volumes = {v["name"] for v in pod.get("volumes", [])}
                assert {m["name"] for m in container.get("volumeMounts", [])} <= volumes


def plain_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


@pytest.mark.parametrize("sample", SAMPLES)
def test_every_loader_writes_where_the_engine_reads(sample: str) -> None:
    # The loader runs in every pod of a group, and the group's engine reads the model in at least one of them:
    # llama.cpp's RPC workers (multi-host-llamacpp.yaml) get their share of the weights from the leader.
    for obj in build_all(sample):
        if obj["kind"] != "LeaderWorkerSet":
            continue
        pods = list(pod_specs(obj))
        runner_text = json.dumps([pod["containers"] for pod in pods])
        for pod in pods:
            loaders = [c for c in pod.get("initContainers", []) if c["name"].startswith("model-loader")]
            for loader in loaders:
                target = loader_target(plain_env(loader))
                assert target.model_path in runner_text, f"{sample}: {target.model_path} not used by any runner"


def test_skip_sample_has_no_loader_and_streams_from_s3() -> None:
    objects = build_all("skip-model-loader-s3.yaml")
    lws = next(o for o in objects if o["kind"] == "LeaderWorkerSet")
    pod = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert "initContainers" not in pod
    runner = pod["containers"][0]
    assert runner["args"][1] == "s3://my-models/DeepSeek-R1-Distill-Qwen-1.5B"
    assert [e["name"] for e in runner["env"]] == [
        "RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ]
    assert skip_model_loader({"llmaz.io/skip-model-loader": "true"})


def test_hpa_sample_builds_its_hpa() -> None:
    hpa = next(o for o in build_all("hpa.yaml") if o["kind"] == "HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 3)
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"


def test_template_creation_timestamps_from_the_server_are_dropped() -> None:
    doc = documents("config/samples/multi-host-service.yaml")[1]
    doc["metadata"].update(namespace=NAMESPACE, uid=SERVICE_UID)
    doc["spec"]["workloadTemplate"]["workerTemplate"]["metadata"] = {"creationTimestamp": None}
    models = {"llama3-405b-instruct": OpenModel.from_dict(documents("config/samples/multi-host-service.yaml")[0])}
    lws = build_from_service(doc, models)[0]
    assert lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] == {
        "labels": {"llmaz.io/model-name": "llama3-405b-instruct", "llmaz.io/model-family-name": "llama3"}
    }


def _scramble(value: Any) -> None:
    """Mutate every dict and list reachable from `value` in place."""
    if isinstance(value, dict):
        for item in list(value.values()):
            _scramble(item)
        value["scrambled"] = True
    elif isinstance(value, list):
        for item in value:
            _scramble(item)
        value.append("scrambled")


@pytest.mark.parametrize("sample", SAMPLES)
def test_builders_neither_mutate_nor_alias_their_inputs(sample: str) -> None:
    # The reconcilers share one parse of an OpenModel or BackendRuntime version between reconciles
    # (controllers.common.ParsedByVersion): a builder that changed its inputs, or returned parts of them that a
    # later step changes, would corrupt every later reconcile.
    docs = documents(f"config/samples/{sample}")
    models = {d["metadata"]["name"]: OpenModel.from_dict(d) for d in docs if d["kind"] == "OpenModel"}
    runtimes = {name: backend(name) for name in ("vllm", "sglang", "llamacpp", "ollama", "tgi", "tensorrt-llm")}
    before = {name: m.to_dict() for name, m in {**models, **runtimes}.items()}
    for doc in docs:
        doc["metadata"].setdefault("namespace", NAMESPACE)
        if doc["kind"] != "Playground":
            continue
        doc["metadata"]["uid"] = PLAYGROUND_UID
        pg = Playground.from_dict(doc)
        runtime = runtimes[backend_name(pg)]
        ordered = main_first([(ref, models[ref.name]) for ref in playground_model_refs(pg)])
        service_cr = build_service(pg, ordered, runtime)
        outputs = [service_cr, build_hpa(pg, runtime)]
        svc = Service.from_dict({**service_cr, "metadata": {**service_cr["metadata"], "uid": SERVICE_UID}})
        outputs += [build_leader_worker_set(svc, ordered, LOADER_IMAGE), build_lb_service(svc, ordered)]
        _scramble(outputs)
    assert {name: m.to_dict() for name, m in {**models, **runtimes}.items()} == before


@pytest.mark.parametrize("sample", SAMPLES)
def test_every_document_of_a_sample_is_a_kind_built_here_or_checked_by_a_test_of_its_own(sample: str) -> None:
    kinds = {doc["kind"] for doc in documents(f"config/samples/{sample}")}
    assert kinds <= BUILT_KINDS | CHECKED_KINDS, f"{sample}: {sorted(kinds - BUILT_KINDS - CHECKED_KINDS)}"


# Samples never applied with the rest: their keys are placeholders anyone can read, so applying them must be a
# choice made file by file.
NOT_APPLIED_TOGETHER = frozenset({"gateway-api-keys.yaml"})


def test_the_kustomization_lists_every_sample_once_but_the_api_keys() -> None:
    # `kubectl apply -k config/samples` applies what it lists: a sample left out would never be applied with the
    # rest, and one listed twice fails kustomize.
    kustomization = yaml.safe_load((REPO / "config" / "samples" / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(set(SAMPLES) - NOT_APPLIED_TOGETHER)


def test_no_two_samples_define_one_object() -> None:
    # Applied together (the kustomization), two samples defining one OpenModel or Playground would overwrite each
    # other, and kustomize refuses the pair.
    seen: dict[tuple[str, str, str], str] = {}
    for sample in SAMPLES:
        for doc in documents(f"config/samples/{sample}"):
            identity = (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
            assert identity not in seen, f"{identity} is in {seen.get(identity)} and {sample}"
            seen[identity] = sample


def test_the_readme_samples_table_names_every_sample_file() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## Samples\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([\w./-]+\.yaml)`", section))
    invalid = {f"invalid/{p.name}" for p in (REPO / "config" / "samples" / "invalid").glob("*.yaml")}
    assert named == set(SAMPLES) | invalid
