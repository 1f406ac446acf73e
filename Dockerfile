# One image for the operator, the sync agent (init container, sidecar, preStop hook) and the store server.
# Runs as a non-root user (65532) and works with a read-only root filesystem: no bytecode is written at
# run time (it is compiled at build time), and nothing else writes outside mounted volumes.
#
#   make image                      # docker build -t memsync:<tag> .
#   make image BASE=debootstrap     # where no registry answers: a Debian 12 + Python 3.11 base made here
#   make image EXTRA_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt   # behind a TLS-intercepting proxy
#   docker run --rm memsync:<tag> --help

# The base image by digest (the multi-arch index of python:3.11-slim, Python 3.11.15 on Debian trixie, as
# published on 2026-08-05), so a rebuild gets the same base. To move it: docker buildx imagetools inspect
# python:3.11-slim, and put the index digest it prints here.
ARG PYTHON_IMAGE=python:3.11-slim@sha256:90744cff8f32887f075c47d747a173ff333e9e98801667af93c357fa9f5e28ff

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# build/image/extra-ca.pem, when `make image EXTRA_CA_BUNDLE=...` put it there, is trusted by pip in this stage
# only, beside pip's own roots; the final stage below never sees it.
COPY pyproject.toml README.md LICENSE constraints.txt build/image/extra-ca.pe[m] ./
COPY operator ./operator
RUN python -m venv /opt/memsync \
 && if [ -s extra-ca.pem ]; then \
      cat "$(/opt/memsync/bin/python -c 'from pip._vendor import certifi; print(certifi.where())')" extra-ca.pem \
        > /tmp/build-ca.pem && export PIP_CERT=/tmp/build-ca.pem; \
    fi \
 && /opt/memsync/bin/pip install --no-compile -c constraints.txt . \
 && /opt/memsync/bin/python -m compileall -q /opt/memsync/lib

FROM ${PYTHON_IMAGE}
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
