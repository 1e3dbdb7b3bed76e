# The llmaz manager image: controllers, admission webhooks and metrics (`llmaz-manager`).
#   make docker-build IMG=<registry>/llmaz:<tag>
# Runs as a non-root user with a read-only root filesystem: everything it writes (webhook and metrics
# certificates) goes under /tmp, an emptyDir in config/manager/manager.yaml.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# pip compiles the bytecode here, so nothing needs writing at run time.
RUN python -m venv /opt/llmaz && /opt/llmaz/bin/pip install . && /opt/llmaz/bin/llmaz-manager --help > /dev/null

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/llmaz /opt/llmaz
ENV PATH=/opt/llmaz/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
# 65532 is the conventional "nonroot" UID; numeric so that runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["llmaz-manager"]
