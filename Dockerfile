# The llmaz manager image: controllers, admission webhooks and metrics (`llmaz-manager`); the same image runs the
# OpenAI-compatible gateway with the `llmaz-gateway` command (config/gateway).
#   make docker-build IMG=<registry>/llmaz:<tag>
#   hack/images/build.sh manager      # buildah, no Docker engine: PYTHON_IMAGE is a local Debian base
# Runs as a non-root user with a read-only root filesystem: everything it writes (webhook and metrics
# certificates) goes under /tmp, an emptyDir in config/manager/manager.yaml.
#
# The dependencies install from the lock files (requirements/manager.txt, `make lock`) with `--require-hashes`:
# exactly the locked versions, each file checked against its hash. xds-protos (the Endpoint Picker's Envoy API)
# ships an older copy of opentelemetry-proto's modules in the same package directory; whichever installs last wins,
# so opentelemetry-proto is installed again over it (tracing's exporter needs its own).
#
# Layers: the dependencies install from the lock files alone, before any source is copied, and the image takes them
# as one layer and the llmaz package as another. A source change rebuilds and ships only the small top layer.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The builder's pip settings (a private index, a TLS proxy's CA bundle), unset unless given with --build-arg. They
# reach only this stage's history, never the final image's.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
ARG PIP_CERT
ARG PIP_DEFAULT_TIMEOUT
WORKDIR /src
COPY requirements/manager.txt requirements/opentelemetry-proto.txt requirements/build.txt ./requirements/
# /opt/llmaz: the runtime venv, dependencies only; the package goes to /opt/llmaz/app (found through a .pth), so the
# two can be separate layers. /opt/build: the build backend, kept out of the runtime venv.
RUN python -m venv /opt/llmaz && python -m venv /opt/build \
    && /opt/llmaz/bin/pip install --require-hashes -r requirements/manager.txt \
    && /opt/llmaz/bin/pip install --require-hashes --force-reinstall --no-deps -r requirements/opentelemetry-proto.txt \
    && /opt/build/bin/pip install --require-hashes -r requirements/build.txt \
    && purelib="$(/opt/llmaz/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
    && echo /opt/llmaz/app > "$purelib/llmaz-app.pth"

FROM deps AS build
COPY pyproject.toml README.md ./
COPY src/llmaz ./src/llmaz
# pip compiles the bytecode here, so nothing needs writing at run time; `pip check` catches a dependency the
# lock missed.
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/wheel . \
    && /opt/llmaz/bin/pip install --no-deps --target /opt/llmaz/app /tmp/wheel/*.whl \
    && /opt/llmaz/bin/pip check \
    && /opt/llmaz/app/bin/llmaz-manager --help > /dev/null \
    && /opt/llmaz/app/bin/llmaz-gateway --help > /dev/null

FROM ${PYTHON_IMAGE}
COPY --from=deps /opt/llmaz /opt/llmaz
COPY --from=build /opt/llmaz/app /opt/llmaz/app
ENV PATH=/opt/llmaz/app/bin:/opt/llmaz/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
# 65532 is the conventional "nonroot" UID; numeric so that runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["llmaz-manager"]
