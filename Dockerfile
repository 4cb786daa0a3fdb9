# Strata's image: the `strata` CLI with every package of it (schemas, ingest, projector, binder,
# scheduler), for compose.yaml and the Helm chart. Build it from the repository's root:
#
#   docker build -t strata:0.1.0 .                  # dependencies from the package index
#
# or offline, from a wheelhouse and a strata-volcano binary made beforehand (docs/container.md; the
# tests do this with podman):
#
#   pip wheel --wheel-dir wheelhouse 'setuptools>=77' <the dependencies of pyproject.toml>
#   (cd strata-volcano && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o ../bin/strata-volcano ./cmd/strata-volcano)
#   docker build --build-context wheelhouse=wheelhouse --build-context strata-volcano=bin \
#                --build-arg PIP_NO_INDEX=1 -t strata:0.1.0 .
#
# The tag is the version of pyproject.toml; the entrypoint is `strata`, so arguments are a command:
# `docker run --rm strata:0.1.0 replay --digest /trace.jsonl`.

# Any Debian-like Python 3.11 image with python3 -m venv and useradd; the tests use one made
# locally with debootstrap (strata/dev/stack/image.py).
ARG BASE_IMAGE=python:3.11-slim
# The Go toolchain that builds strata-volcano when no built binary is given (go.mod: go 1.26).
ARG GO_IMAGE=golang:1.26-bookworm

# The wheels to install from: by default a folder with only a README, so pip asks the package index;
# `--build-context wheelhouse=DIR` replaces this stage with DIR's wheels.
FROM scratch AS wheelhouse
COPY deploy/compose/wheelhouse/ /

# strata-volcano (docs/volcano.md), Strata's Go program that runs Volcano's actions and plugins as
# a replica: built from strata-volcano/ by default, static (no cgo), so it runs on any base;
# `--build-context strata-volcano=DIR` replaces the stage named strata-volcano with DIR's binary,
# and then this build stage is skipped.
FROM ${GO_IMAGE} AS strata-volcano-build
WORKDIR /src
COPY strata-volcano/go.mod strata-volcano/go.sum ./
RUN go mod download
COPY strata-volcano/ ./
RUN CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags '-s -w' -o /out/strata-volcano ./cmd/strata-volcano

FROM scratch AS strata-volcano
COPY --from=strata-volcano-build /out/strata-volcano /strata-volcano

FROM ${BASE_IMAGE} AS build
# PIP_NO_INDEX=1 makes the build use the wheelhouse alone, and fail rather than reach a network
ARG PIP_NO_INDEX
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_FIND_LINKS=/wheelhouse \
    PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/strata
COPY --from=wheelhouse . /wheelhouse/
# Dependencies first, from pyproject.toml alone: a change of Strata's code keeps this layer.
# kubernetes ships an asyncio copy of its whole client (kubernetes.aio, 68 MB with its bytecode)
# that is imported only by name; Strata uses the synchronous one, so the copy goes.
COPY pyproject.toml /src/
RUN python3 -c 'import tomllib; p = tomllib.load(open("/src/pyproject.toml", "rb")); print("\n".join(p["project"]["dependencies"]))' > /tmp/requirements.txt \
 && /opt/strata/bin/pip install --requirement /tmp/requirements.txt \
 && rm -rf /opt/strata/lib/python3*/site-packages/kubernetes/aio
COPY schemas /src/schemas
COPY ingest /src/ingest
COPY projector /src/projector
COPY binder /src/binder
COPY scheduler /src/scheduler
COPY strata /src/strata
COPY README.md /src/
# Not editable: the venv gets a copy of the package; then pip and setuptools leave it, since the
# image runs Strata and installs nothing.
RUN /opt/strata/bin/pip install --no-deps /src \
 && /opt/strata/bin/python -m pip uninstall --yes pip setuptools \
 && /opt/strata/bin/strata --version

FROM ${BASE_IMAGE}
ARG STRATA_VERSION=0.1.0
LABEL org.opencontainers.image.title="strata" \
      org.opencontainers.image.description="Volcano's batch-scheduler cache as an event-sourced, deterministic fold of one Kafka log" \
      org.opencontainers.image.version="${STRATA_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="Strata"
# uid and gid 10001: what the Helm chart's securityContext runs as (deploy/helm/strata/values.yaml)
RUN groupadd --system --gid 10001 strata \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/strata --no-create-home \
            --shell /usr/sbin/nologin strata \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/strata
COPY --from=build /opt/strata /opt/strata
COPY --from=strata-volcano /strata-volcano /opt/strata/bin/strata-volcano
# `strata volcano` starts this binary (instead of building one from sources the image lacks)
ENV PATH=/opt/strata/bin:$PATH \
    STRATA_VOLCANO_BIN=/opt/strata/bin/strata-volcano \
    STRATA_DATA_DIR=/var/lib/strata \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /var/lib/strata
USER 10001:10001
ENTRYPOINT ["strata"]
CMD ["--help"]
