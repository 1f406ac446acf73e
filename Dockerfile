# One image for the operator, the sync agent (init container, sidecar, preStop hook) and the store server.
# Runs as a non-root user (65532) and works with a read-only root filesystem: no bytecode is written at
# run time (it is compiled at build time), and nothing else writes outside mounted volumes.
#
#   make image                      # docker build -t memsync:<tag> .
#   docker run --rm memsync:<tag> --help

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m venv /opt/memsync \
 && /opt/memsync/bin/pip install --no-compile . \
 && /opt/memsync/bin/python -m compileall -q /opt/memsync/lib

FROM python:3.11-slim
LABEL org.opencontainers.image.title="memsync" \
      org.opencontainers.image.description="Memory stores for self-hosted agent sandboxes, kept in two-way sync" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 65532 memsync \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin memsync
COPY --from=build /opt/memsync /opt/memsync
ENV PATH=/opt/memsync/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
WORKDIR /tmp
# The Pod and the Deployments set `command: ["memsync", ...]`; this is for `docker run`.
ENTRYPOINT ["memsync"]
CMD ["--help"]
