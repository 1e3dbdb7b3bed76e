# llmaz for Python: every developer and CI entry point. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALL_STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed

# Everything built from Go modules lives outside the repo, keyed by version, and is built only when missing.
LLMAZ_CACHE ?= $(HOME)/.cache/llmaz
TOOLS_BIN := $(LLMAZ_CACHE)/bin/tools
KUSTOMIZE_VERSION := v5.8.1
KUSTOMIZE := $(TOOLS_BIN)/kustomize-$(KUSTOMIZE_VERSION)
HELM_VERSION := v3.22.0
HELM := $(TOOLS_BIN)/helm-$(HELM_VERSION)
# The releases whose CRDs docs/examples/ is validated against (test/integration/examples): Envoy Gateway's (with the
# Gateway API CRDs it bundles) and Envoy AI Gateway's, copied from their Go modules by `make example-crds`.
ENVOY_GATEWAY_VERSION := v1.9.1
ENVOY_GATEWAY_CRDS := $(LLMAZ_CACHE)/crd/envoy-gateway-$(ENVOY_GATEWAY_VERSION)
ENVOY_AI_GATEWAY_VERSION := v1.0.0
ENVOY_AI_GATEWAY_CRDS := $(LLMAZ_CACHE)/crd/envoy-ai-gateway-$(ENVOY_AI_GATEWAY_VERSION)
export LLMAZ_CACHE
# The tests run these exact binaries (llmaz_dev.envtest._assets.tool_path reads the same names).
export KUSTOMIZE HELM

PYTEST_ARGS ?=

# The project's images, named and versioned together (make docker-build / docker-push / deploy), and the tools that
# handle them. The default global config names LOADER_IMG's default; `make deploy LOADER_IMG=...` overrides it.
# ENVOY_IMG is the Envoy data plane's (config/gateway-envoy), which only that install variant runs.
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
IMG ?= llmaz:v$(VERSION)
LOADER_IMG ?= llmaz-model-loader:v$(VERSION)
ENVOY_IMG ?= llmaz-envoy:v$(VERSION)
# What `make deploy` installs: config/default, or an overlay of it (config/node: the node tier's local images).
DEPLOY_CONFIG ?= config/default
CONTAINER_TOOL ?= docker
KUBECTL ?= kubectl

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Setup

.PHONY: install
install: $(INSTALL_STAMP) ## Create .venv and install the package with its dev and loader extras (idempotent).

# The dependencies install from the lock files, requirements/*.txt (`make lock`), with their hashes checked; the
# package itself after them, editable, without dependencies of its own. xds-protos (the Endpoint Picker's Envoy API)
# ships an older copy of opentelemetry-proto's modules in the same package directory; whichever installs last wins,
# so opentelemetry-proto is installed again over it (OTEL_PROTO_REINSTALL, the same in the Dockerfiles).
LOCKED_INSTALL = $(PY) -m pip install --quiet --require-hashes
OTEL_PROTO_REINSTALL = $(LOCKED_INSTALL) --force-reinstall --no-deps -r requirements/opentelemetry-proto.txt

$(INSTALL_STAMP): pyproject.toml requirements/dev.txt requirements/opentelemetry-proto.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(LOCKED_INSTALL) -r requirements/dev.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(OTEL_PROTO_REINSTALL)
	@touch $@

.PHONY: lock
lock: install ## Resolve requirements/*.txt from pyproject.toml, keeping locked versions (UPGRADE=1: the newest allowed).
	$(PY) -m llmaz_dev.lock $(if $(filter 1 true,$(UPGRADE)),--upgrade)

$(KUSTOMIZE):
	@mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN)/.kustomize-build go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	mv $(TOOLS_BIN)/.kustomize-build/kustomize $@ && rmdir $(TOOLS_BIN)/.kustomize-build

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Build the pinned kustomize into the cache.
	@echo $(KUSTOMIZE)

# helm as its release Makefile stamps it: its version, and the Kubernetes version `helm template` assumes (that of
# the client-go it is built with) instead of the v1.20 fallback.
$(HELM):
	@mkdir -p $(TOOLS_BIN)
	@gomod=$$(go mod download -json helm.sh/helm/v3@$(HELM_VERSION) | awk -F'"' '$$2 == "GoMod" { print $$4 }'); \
	kube=$$(awk '$$1 == "k8s.io/client-go" { sub(/^v0\./, "", $$2); split($$2, v, "."); print v[1]; exit }' "$$gomod"); \
	pkg=helm.sh/helm/v3; \
	flags="-s -w -X $$pkg/internal/version.version=$(HELM_VERSION) -X $$pkg/internal/version.gitTreeState=clean"; \
	for p in chartutil lint/rules; do flags+=" -X $$pkg/pkg/$$p.k8sVersionMajor=1 -X $$pkg/pkg/$$p.k8sVersionMinor=$$kube"; done; \
	echo "building helm $(HELM_VERSION) (Kubernetes 1.$$kube) into $(TOOLS_BIN)" >&2; \
	CGO_ENABLED=0 GOBIN=$(TOOLS_BIN)/.helm-build go install -trimpath -ldflags "$$flags" $$pkg/cmd/helm@$(HELM_VERSION)
	mv $(TOOLS_BIN)/.helm-build/helm $@ && rmdir $(TOOLS_BIN)/.helm-build

.PHONY: helm
helm: $(HELM) ## Build the pinned helm (v3, from its Go module) into the cache.
	@echo $(HELM)

# $(call copy-crds,module,version,directories in the module,destination): the *.yaml of those directories,
# copied from the module (`go mod download`: only that module's zip, checked against the Go checksum database)
# into the destination, which appears complete or not at all.
define copy-crds
	@json=$$(go mod download -json $(1)@$(2)) || { echo "$$json" >&2; echo "cannot download $(1)@$(2)" >&2; exit 1; }; \
	dir=$$(echo "$$json" | awk -F'"' '$$2 == "Dir" { print $$4 }'); \
	rm -rf $(4).partial && mkdir -p $(4).partial; \
	for d in $(3); do cp "$$dir/$$d"/*.yaml $(4).partial/; done; \
	chmod -R u+w $(4).partial && mv $(4).partial $(4); \
	echo "copied the CRDs of $(1)@$(2) into $(4)" >&2
endef

$(ENVOY_GATEWAY_CRDS):
	$(call copy-crds,github.com/envoyproxy/gateway,$(ENVOY_GATEWAY_VERSION),charts/gateway-helm/charts/crds/crds charts/gateway-helm/charts/crds/crds/generated,$@)

$(ENVOY_AI_GATEWAY_CRDS):
	$(call copy-crds,github.com/envoyproxy/ai-gateway,$(ENVOY_AI_GATEWAY_VERSION),manifests/charts/ai-gateway-crds-helm/templates,$@)

.PHONY: example-crds
example-crds: $(ENVOY_GATEWAY_CRDS) $(ENVOY_AI_GATEWAY_CRDS) ## Copy the Envoy Gateway and Envoy AI Gateway CRDs docs/examples is checked against into the cache.

.PHONY: cluster-bins
cluster-bins: ## Build kube-apiserver, etcd, kubectl (versions: hack/cluster/go.mod) into the cache if missing.
	@hack/cluster/build.sh >&2

.PHONY: llama-server
llama-server: ## Build the static llama.cpp server (CPU only) into the cache.
	@hack/llamacpp/build.sh >&2

.PHONY: e2e-bins
e2e-bins: ## Also build kube-controller-manager, kube-scheduler, kwok, the LWS controller (simulated e2e cluster).
	@hack/cluster/build.sh --e2e >&2

.PHONY: node-packages
node-packages: ## Install the Debian packages of the real node (hack/node/packages.txt: containerd, runc, CNI, nftables, buildah).
	@hack/node/install-packages.sh

# A pinned version that leaves the mirror is replaced by its release's newer one at install time; this warns
# beforehand, from the local apt index only (about a second), so the pin gets tested and bumped first.
.PHONY: debian-pins
debian-pins: ## Warn about pins of hack/node/packages.txt and hack/webui/packages.txt that are no longer apt's candidate.
	@hack/node/install-packages.sh --check hack/node/packages.txt hack/webui/packages.txt

.PHONY: node-bins
node-bins: ## Also build kubelet, kube-proxy, CoreDNS, metrics-server and kube-router (the real node of the e2e tier).
	@hack/cluster/build.sh --node >&2

##@ Development

.PHONY: manifests
manifests: install $(KUSTOMIZE) ## Generate CRDs, webhook and RBAC manifests from src/llmaz, then the chart.
	$(PY) -m llmaz_dev.crdgen config/crd/bases
	$(PY) -m llmaz_dev.crdgen --gie config/gie
	$(PY) -m llmaz_dev.webhookgen config/webhook/manifests.yaml
	$(PY) -m llmaz_dev.rbacgen config/rbac
	$(PY) -m llmaz_dev.dashboards config/grafana
	$(PY) -m llmaz.gateway.envoy > config/gateway-envoy/envoy.json
	$(PY) -m llmaz_dev.chartgen --kustomize $(KUSTOMIZE) chart

.PHONY: chart
chart: install $(KUSTOMIZE) ## Generate the Helm chart, chart/, from config/ (kustomize build, then templating).
	$(PY) -m llmaz_dev.chartgen --kustomize $(KUSTOMIZE) chart

.PHONY: fmt
fmt: install ## Format the code.
	$(VENV)/bin/ruff format src test hack bench
	$(VENV)/bin/ruff check --fix src test hack bench

# mypy: test/ and test/e2e/ have no __init__.py, so --explicit-package-bases names their conftests test.conftest and
# test.e2e.conftest; bench/ is not a package, so run.py's `import suite` resolves with bench/ as the base (bench/
# needs the bench extra, matplotlib, installed).
.PHONY: lint
lint: install $(BENCH_STAMP) ## ruff check, ruff format --check, mypy --strict over src, test and bench.
	$(VENV)/bin/ruff check src test hack bench
	$(VENV)/bin/ruff format --check src test hack bench
	$(VENV)/bin/mypy --strict src
	$(VENV)/bin/mypy --strict --explicit-package-bases test
	$(VENV)/bin/mypy --strict bench

.PHONY: kustomize-build
kustomize-build: $(KUSTOMIZE) ## Check that every kustomize directory under config/ builds.
	@for d in $$(find config -name kustomization.yaml -printf '%h\n' | sort); do \
	  $(KUSTOMIZE) build $$d > /dev/null || { echo "kustomize build $$d failed"; exit 1; }; \
	  echo "kustomize build $$d: ok"; \
	done

##@ Test

.PHONY: test-unit
test-unit: install $(KUSTOMIZE) $(HELM) ## Fast tests: pure logic, no cluster (the chart's with kustomize and helm).
	$(PY) -m pytest test/unit $(PYTEST_ARGS)

# The integration tier also runs llama-server and starts and stops the real node (test/integration/node).
.PHONY: test-integration
test-integration: install cluster-bins node-bins image-build example-crds ## Tests against a real kube-apiserver + etcd, llama-server, the node's lifecycle.
	$(PY) -m pytest test/integration $(PYTEST_ARGS)

# test-e2e: kind when it and a container engine work (hack/e2e/kind.sh), USE_EXISTING_CLUSTER=true for the
# cluster of KUBECONFIG (llmaz, LWS and kwok installed), otherwise the simulated cluster. E2E_CLUSTER forces one:
# simulated, node (one real node on this machine, docs/e2e.md), kind or existing. `make test` runs the simulated
# tier, then the node tier.
KIND ?= kind
E2E_IMG ?= llmaz:e2e
E2E_CLUSTER ?= $(if $(filter true,$(USE_EXISTING_CLUSTER)),existing,$(if $(shell command -v $(KIND) 2>/dev/null && $(CONTAINER_TOOL) info >/dev/null 2>&1 && echo y),kind,simulated))

.PHONY: test-e2e
test-e2e: install $(HELM) ## End-to-end tests: kind if available, USE_EXISTING_CLUSTER=true, else a simulated cluster.
	@echo "e2e cluster: $(E2E_CLUSTER)" >&2
	@case "$(E2E_CLUSTER)" in \
	  simulated) $(MAKE) --no-print-directory cluster-bins e2e-bins && \
	    E2E_CLUSTER=simulated $(PY) -m pytest test/e2e $(PYTEST_ARGS) ;; \
	  node) $(MAKE) --no-print-directory cluster-bins node-bins image-build $(KUSTOMIZE) && \
	    E2E_CLUSTER=node $(PY) -m pytest test/e2e $(PYTEST_ARGS) ;; \
	  kind) KIND=$(KIND) CONTAINER_TOOL=$(CONTAINER_TOOL) E2E_IMG=$(E2E_IMG) PY=$(PY) hack/e2e/kind.sh $(PYTEST_ARGS) ;; \
	  existing) USE_EXISTING_CLUSTER=true $(PY) -m pytest test/e2e $(PYTEST_ARGS) ;; \
	  *) echo "E2E_CLUSTER must be simulated, node, kind or existing" >&2; exit 2 ;; \
	esac

# make test-webui (opt-in, not part of `make test`): Open WebUI from PyPI (hack/webui/requirements.txt, pinned, in a
# venv of its own under the cache, never .venv) against the llmaz-gateway at WEBUI_GATEWAY_URL, where `make run`
# serves tiny-llama, driven in headless Chromium (Debian packages of hack/webui/packages.txt, installed if missing):
# one chat, then a screenshot in WEBUI_OUT. WEBUI_STANDIN=true serves the gateway itself instead, over in-memory
# objects and a scripted engine (llmaz_dev.testing.standin_gateway), for a check without a node. docs/gateway.md.
WEBUI_VENV := $(LLMAZ_CACHE)/webui/venv
WEBUI_GATEWAY_URL ?= http://127.0.0.1:8000/v1
WEBUI_STANDIN ?= false
WEBUI_OUT ?= .dev/webui
# Bounds the browser run (Open WebUI's start, the chat, the screenshot); each install step has its own bound.
# --foreground: Ctrl-C reaches the run, and on the deadline run.py alone is stopped and stops what it started.
WEBUI_TIMEOUT ?= 900

.PHONY: test-webui
test-webui: $(if $(filter true,$(WEBUI_STANDIN)),install) ## Open WebUI against llmaz-gateway (`make run` first), a chat in headless Chromium, a screenshot.
	@hack/node/install-packages.sh hack/webui/packages.txt test-webui
	@webui_py=$$(PYTHON=$(PYTHON) hack/webui/install.sh $(WEBUI_VENV) | tail -n 1); \
	timeout --foreground -k 20 $(WEBUI_TIMEOUT) $$webui_py hack/webui/run.py --gateway '$(WEBUI_GATEWAY_URL)' --out '$(WEBUI_OUT)' \
	  $(if $(filter true,$(WEBUI_STANDIN)),--standin $(abspath $(PY))) || { \
	  rc=$$?; if [ $$rc = 124 ]; then echo "make test-webui: stopped after WEBUI_TIMEOUT=$(WEBUI_TIMEOUT) s" >&2; fi; exit $$rc; }

.PHONY: test-webui-lock
test-webui-lock: ## Reinstall the test-webui venv ignoring hack/webui/constraints.txt, then rewrite it (after a version bump).
	@PYTHON=$(PYTHON) hack/webui/install.sh --lock $(WEBUI_VENV) >/dev/null

.PHONY: bench-admission
bench-admission: install ## Admission latency p50/p99 at 100 and 500 requests/s over loopback HTTPS (not a test).
	$(PY) bench/admission.py

.PHONY: bench-admission-floor
bench-admission-floor: install $(BENCH_STAMP) ## Admission latency of our webhooks vs bare aiohttp and asyncio TLS servers (~2 min).
	$(PY) bench/admission_floor.py

$(BENCH_STAMP): pyproject.toml requirements/bench.txt | $(INSTALL_STAMP)
	$(LOCKED_INSTALL) -r requirements/bench.txt
	$(OTEL_PROTO_REINSTALL)
	@touch $@

# Go llmaz built from a checkout or git directory of it given at run time (hack/llmaz-go/build.sh), to compare against:
# its manager and the CRDs of the same version under $(LLMAZ_CACHE)/llmaz-go/<ref>/, and the image
# llmaz.local/llmaz-go:<ref> in the image index. Nothing of it enters the repository. Needs root for the image, as
# image-build. `make bench BENCH_GO_SRC=<the same path> [BENCH_GO_REF=...]` benchmarks against that version.
LLMAZ_GO_SRC ?=
LLMAZ_GO_REF ?= v0.1.4
.PHONY: llmaz-go
llmaz-go: ## Build Go llmaz LLMAZ_GO_REF (v0.1.4) from LLMAZ_GO_SRC=<checkout or git dir>, and its image, into the cache.
	@test -n '$(LLMAZ_GO_SRC)' || { echo "make llmaz-go needs LLMAZ_GO_SRC=<a checkout or git directory of llmaz>" >&2; exit 2; }
	@hack/node/install-packages.sh
	@LLMAZ_GO_SRC='$(LLMAZ_GO_SRC)' LLMAZ_GO_REF='$(LLMAZ_GO_REF)' hack/llmaz-go/build.sh image

# make llm-d (opt-in, for the routing bench's peer): llm-d's Endpoint Picker LLMD_REF (v0.10.0) from LLMD_SRC=<checkout
# or git dir of llm-d-router>, with the Gateway API Inference Extension GIE_REF (v1.5.0) from GIE_SRC=<checkout or git
# dir> replacing the version its go.mod requires, into $(LLMAZ_CACHE)/llm-d/<refs>/epp (hack/llm-d/build.sh).
LLMD_REF ?= v0.10.0
GIE_REF ?= v1.5.0
.PHONY: llm-d
llm-d: ## Build llm-d's EPP LLMD_REF (v0.10.0) from LLMD_SRC=<dir> with GIE_SRC=<dir> at GIE_REF (v1.5.0), into the cache.
	@test -n '$(LLMD_SRC)' -a -n '$(GIE_SRC)' || { echo "make llm-d needs LLMD_SRC=<llm-d-router checkout or git dir> and GIE_SRC=<gateway-api-inference-extension checkout or git dir>" >&2; exit 2; }
	@LLMD_SRC='$(LLMD_SRC)' GIE_SRC='$(GIE_SRC)' LLMD_REF='$(LLMD_REF)' GIE_REF='$(GIE_REF)' hack/llm-d/build.sh

# make test-migration (opt-in, not part of `make test`: it needs Go llmaz's source, given at run time): on the real
# node, Go llmaz LLMAZ_GO_REF serving a model, switched to this project and back while a client asks every 100 ms;
# prints the per-switch report (test/e2e/test_migration.py, docs/migration.md).
.PHONY: test-migration
test-migration: install cluster-bins node-bins image-build $(KUSTOMIZE) ## Go llmaz -> llmaz for Python -> Go on the real node, with LLMAZ_GO_SRC=<checkout or git dir>.
	@test -n '$(LLMAZ_GO_SRC)' || { echo "make test-migration needs LLMAZ_GO_SRC=<a checkout or git directory of llmaz>" >&2; exit 2; }
	@source="$$(LLMAZ_GO_SRC='$(LLMAZ_GO_SRC)' LLMAZ_GO_REF='$(LLMAZ_GO_REF)' hack/llmaz-go/build.sh image | sed -n 's/^source=//p')" && \
	  test -n "$$source" && \
	  E2E_CLUSTER=migration LLMAZ_GO_SOURCE="$$source" KUSTOMIZE=$(KUSTOMIZE) $(PY) -m pytest test/e2e -s $(PYTEST_ARGS)

.PHONY: bench
bench: install $(BENCH_STAMP) cluster-bins node-bins image-build ## Python vs Go llmaz benchmarks, serving on the real node (~75 min; BENCH_* knobs in bench/README.md).
	$(PY) bench/run.py

.PHONY: bench-quick
bench-quick: install $(BENCH_STAMP) cluster-bins ## A few-minute smoke run of every benchmark scenario.
	BENCH_QUICK=1 $(PY) bench/run.py

.PHONY: bench-runtime
bench-runtime: install $(BENCH_STAMP) cluster-bins ## Runtime alone: no-op reconciler vs controller-runtime, 10k objects.
	BENCH_SCENARIOS=runtime $(PY) bench/run.py

.PHONY: bench-memory
bench-memory: install $(BENCH_STAMP) cluster-bins ## Manager RSS with 10k unrelated Services, HPAs and LWS each vs none.
	BENCH_SCENARIOS=memory $(PY) bench/run.py

.PHONY: bench-growth
bench-growth: install $(BENCH_STAMP) cluster-bins ## Cost per Playground at N = 100, 1,000, 10,000, and cold starts over N.
	BENCH_SCENARIOS=growth $(PY) bench/run.py

.PHONY: bench-serving
bench-serving: install $(BENCH_STAMP) cluster-bins node-bins image-build ## Routing strategies side by side on the real node: cached tokens against the ceiling, prefill, TTFT, the trace's knees (~30 min).
	BENCH_SCENARIOS=routing $(PY) bench/run.py

.PHONY: bench-autoscale
bench-autoscale: install $(BENCH_STAMP) cluster-bins node-bins image-build ## The gateway's autoscaler on the real node: a staircase of 1, 8, 0 streams; scale-up and scale-down times (~10 min).
	BENCH_SCENARIOS=autoscale $(PY) bench/run.py

.PHONY: bench-tenancy
bench-tenancy: install $(BENCH_STAMP) cluster-bins node-bins image-build ## Flow control on the real node: priority under a batch load, fairness at 4:1, a token budget's overshoot (~10 min).
	BENCH_SCENARIOS=tenancy $(PY) bench/run.py

.PHONY: bench-gateway
bench-gateway: install $(BENCH_STAMP) ## Gateway: latency added to a fast fake engine at 1/50/200 in flight, memory per stream, 200 paced streams.
	BENCH_SCENARIOS=gateway $(PY) bench/run.py

.PHONY: bench-picker
bench-picker: install $(BENCH_STAMP) ## Prefix-aware picker: key + pick cost at 300 requests/s, memory for 100k prompts.
	BENCH_SCENARIOS=picker $(PY) bench/run.py

# make test: the checks, the builds, then the tiers (unit and integration side by side, the simulated cluster, the
# real node last), each step timed; it ends with where the time went and each tier's slowest tests
# (llmaz_dev/tiers.py). `make test-unit` and friends run one tier alone.
.PHONY: test
test: install ## Everything CI runs: lint, the builds and every test tier, with where the time went.
	@$(PY) -m llmaz_dev.tiers --pytest-args '$(PYTEST_ARGS)'

##@ Run

.PHONY: dev-up
dev-up: install cluster-bins $(KUSTOMIZE) ## Start (or reuse) a background control plane with CRDs, backends, global config.
	@$(PY) -m llmaz_dev.envtest up --dir .dev --crd-path config/crd/bases --manifests config/dev --kustomize $(KUSTOMIZE)

.PHONY: dev-down
dev-down: install ## Stop the background control plane started by dev-up.
	@$(PY) -m llmaz_dev.envtest down --dir .dev

# make run: a real node serving the tiny demo model where the machine allows it (root on a Debian host), else the
# control plane alone. RUN_MODE=node|control-plane forces one; DEMO=false installs llmaz but serves no model.
RUN_MODE ?= auto
DEMO ?= true
.PHONY: run
run: install cluster-bins $(KUSTOMIZE) ## llmaz serving a model on a real node (else a local control plane), in the foreground.
	@mode=$$($(PY) -m llmaz_dev.envtest.devrun --probe --mode $(RUN_MODE)); \
	if [ "$$mode" = node ]; then $(MAKE) --no-print-directory node-bins image-build IMAGES='$(RUN_IMAGES)'; fi; \
	exec $(PY) -m llmaz_dev.envtest.devrun --dir .dev --kustomize $(KUSTOMIZE) --mode $$mode $(if $(filter false,$(DEMO)),--no-demo)

##@ Deploy

.PHONY: docker-build
docker-build: ## Build the manager image IMG, the model-loader image LOADER_IMG and the Envoy image ENVOY_IMG.
	$(CONTAINER_TOOL) build -t $(IMG) .
	$(CONTAINER_TOOL) build -f Dockerfile.loader -t $(LOADER_IMG) .
	$(CONTAINER_TOOL) build -f Dockerfile.envoy -t $(ENVOY_IMG) .

# Needs root: the packages (buildah, debootstrap; hack/node/packages.txt) install only when missing. IMAGES names
# some of hack/images/build.sh's images; `make run` builds only those it serves with (RUN_IMAGES).
IMAGES ?= all
RUN_IMAGES := manager loader pause llama-server
.PHONY: image-build
image-build: ## Build the images with buildah (no Docker engine needed): manager, model loader, Envoy, pause, llama-server, Prometheus and its operator.
	@hack/node/install-packages.sh
	@hack/images/build.sh $(IMAGES)

.PHONY: docker-push
docker-push: ## Push the manager image IMG, the model-loader image LOADER_IMG and the Envoy image ENVOY_IMG.
	$(CONTAINER_TOOL) push $(IMG)
	$(CONTAINER_TOOL) push $(LOADER_IMG)
	$(CONTAINER_TOOL) push $(ENVOY_IMG)

.PHONY: deploy
deploy: $(KUSTOMIZE) ## Install the CRDs, then llmaz (DEPLOY_CONFIG, default config/default, images IMG, LOADER_IMG, ENVOY_IMG; MODEL_POD_SECURITY).
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -
	$(KUBECTL) wait --for=condition=Established --timeout=60s -f config/crd/bases
	@rm -rf .dev/deploy && mkdir -p .dev/deploy
	cd .dev/deploy && $(KUSTOMIZE) create --resources ../../$(DEPLOY_CONFIG) && $(KUSTOMIZE) edit set image controller=$(IMG) envoy=$(ENVOY_IMG)
	@# A LOADER_IMG given on the command line or in the environment becomes the global config's own
	@# init-container-image key, merged into the ConfigMap: it overrides config.data's and keeps every other setting.
	@if [ "$(origin LOADER_IMG)" != file ]; then cd .dev/deploy && $(KUSTOMIZE) edit add configmap \
	  llmaz-global-config --namespace=llmaz-system --behavior=merge '--from-literal=init-container-image=$(LOADER_IMG)'; fi
	@# MODEL_POD_SECURITY=none (docs/migration.md: pods as llmaz renders them, no rollout) merges its key the same way.
	@if [ -n "$(MODEL_POD_SECURITY)" ]; then cd .dev/deploy && $(KUSTOMIZE) edit add configmap \
	  llmaz-global-config --namespace=llmaz-system --behavior=merge '--from-literal=model-pod-security=$(MODEL_POD_SECURITY)'; fi
	@# Replacing a running llmaz (docs/migration.md): the webhook configurations already exist and no manager serves
	@# them yet, so the objects that need admission (the BackendRuntimes) are refused on the first pass; they are
	@# applied again once the new manager is rolled out and admitting.
	$(KUSTOMIZE) build .dev/deploy > .dev/deploy/manifests.yaml
	$(KUBECTL) apply --server-side -f .dev/deploy/manifests.yaml || { \
	  echo "some objects were refused (no manager admits them yet): applying again once llmaz-controller-manager is rolled out" >&2; \
	  $(KUBECTL) -n llmaz-system rollout status deployment/llmaz-controller-manager --timeout=180s && \
	  $(KUBECTL) apply --server-side -f .dev/deploy/manifests.yaml; }

.PHONY: undeploy
undeploy: $(KUSTOMIZE) ## Remove llmaz and its CRDs (and so every llmaz object) from the current kubectl context.
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found -f -
