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
# the operator links no BLAS, no CUDA and no S3 client (see the Makefile); the
# CPU worker beside it is its planner (`vitjob-worker plan`, run as a child
# process to size GPU jobs before their pods: operator/admission.h), so the
# memory the operator checks comes from the code that allocates it
RUN make -j"$(nproc)" BUILD=/out ARCH="-march=x86-64-v2" GIT_COMMIT="${GIT_COMMIT}" NVCC= \
      /out/bin/vitjob-operator /out/bin/vitjob-worker \
 && /out/bin/vitjob-operator --version \
 && /out/bin/vitjob-worker plan --device cuda --gpu-memory 80G --json > /dev/null

FROM ${RUNTIME_BASE}
ARG VERSION=0.1.0
ARG GIT_COMMIT=unknown
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      ca-certificates libcjson1 libyaml-0-2 libcurl4 libmicrohttpd12 \
      libxml2 zlib1g libopenblas0-openmp libsleef3 libgloo0 libgomp1 libisal2 libturbojpeg0 \
      libjpeg62-turbo libspng0 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 vitjob \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin vitjob
COPY --from=build /out/bin/vitjob-operator /out/bin/vitjob-worker /usr/local/bin/
LABEL org.opencontainers.image.title="vitjob-operator" \
      org.opencontainers.image.description="Kubernetes operator for ViTJob: sharded Vision Transformer training" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.source="https://github.com/vitjob/vitjob" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/vitjob-operator"]
