# docker/operator.Dockerfile - the vitjob-operator image: built from this
# repository (context: its root), run as a non-root user, fine with a
# read-only root filesystem (it writes nothing but logs to stderr).
#
#   buildah bud -f docker/operator.Dockerfile --build-arg GIT_COMMIT=$(git rev-parse --short=12 HEAD) \
#     -t ghcr.io/vitjob/vitjob-operator:0.1.0 .
#
# The bases are build arguments (a mirror, a pinned digest, or a local base:
# `make image-test` uses one made with debootstrap). Both must be Debian 12
# or a derivative with the same package names.
ARG BUILD_BASE=docker.io/library/debian:bookworm
ARG RUNTIME_BASE=docker.io/library/debian:bookworm-slim

FROM ${BUILD_BASE} AS build
ARG GIT_COMMIT=unknown
WORKDIR /src
COPY scripts/deps.sh scripts/deps.sh
RUN scripts/deps.sh build && rm -rf /var/lib/apt/lists/*
COPY . .
# the operator alone: no BLAS, no CUDA, no S3 client in it (see the Makefile)
RUN make -j"$(nproc)" BUILD=/out ARCH= GIT_COMMIT="${GIT_COMMIT}" NVCC= /out/bin/vitjob-operator \
 && /out/bin/vitjob-operator --version

FROM ${RUNTIME_BASE}
ARG VERSION=0.1.0
ARG GIT_COMMIT=unknown
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      ca-certificates libcjson1 libyaml-0-2 libcurl4 libmicrohttpd12 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 vitjob \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin vitjob
COPY --from=build /out/bin/vitjob-operator /usr/local/bin/vitjob-operator
LABEL org.opencontainers.image.title="vitjob-operator" \
      org.opencontainers.image.description="Kubernetes operator for ViTJob: sharded Vision Transformer training" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.source="https://github.com/vitjob/vitjob" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/vitjob-operator"]
