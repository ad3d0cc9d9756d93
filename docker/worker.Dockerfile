# docker/worker.Dockerfile - the vitjob-worker image (context: the
# repository's root), run as a non-root user. Two variants, by build
# arguments:
#
#   CPU (the default; what `make image-test` builds and runs):
#     buildah bud -f docker/worker.Dockerfile -t ghcr.io/vitjob/vitjob-worker:0.1.0-cpu .
#
#   GPU: the CUDA backend (cuBLASLt, NCCL) is built where nvcc exists, so a
#   CUDA devel base builds it and a CUDA runtime base (which carries cuBLAS
#   and NCCL) runs it; the bases must have Debian 12's package names for
#   the libraries scripts/deps.sh installs (gloo, OpenBLAS, SLEEF), e.g.
#   NVIDIA's Ubuntu 24.04 images:
#     buildah bud -f docker/worker.Dockerfile \
#       --build-arg BUILD_BASE=nvcr.io/nvidia/cuda:12.6.3-devel-ubuntu24.04 \
#       --build-arg RUNTIME_BASE=nvcr.io/nvidia/cuda:12.6.3-runtime-ubuntu24.04 \
#       --build-arg CUDA_ARCH="-gencode arch=compute_90,code=sm_90" \
#       -t ghcr.io/vitjob/vitjob-worker:0.1.0 .
#
# The dataset is not in the image: spec.data.uri names it (file:// on a
# volume, or the embedded Fashion-MNIST of the demo image's /usr/share).
ARG BUILD_BASE=docker.io/library/debian:bookworm
ARG RUNTIME_BASE=docker.io/library/debian:bookworm-slim

FROM ${BUILD_BASE} AS build
ARG GIT_COMMIT=unknown
ARG CUDA_ARCH="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]"
WORKDIR /src
COPY scripts/deps.sh scripts/deps.sh
RUN scripts/deps.sh build && rm -rf /var/lib/apt/lists/*
COPY . .
# -march: the image runs on any x86-64 node, not only the builder's CPU
RUN make -j"$(nproc)" BUILD=/out ARCH="-march=x86-64-v2" GIT_COMMIT="${GIT_COMMIT}" \
      CUDA_ARCH="${CUDA_ARCH}" /out/bin/vitjob-worker \
      $(command -v nvcc >/dev/null && echo /out/lib/libvitjob_cuda.so) \
 && mkdir -p /out/install/bin /out/install/lib \
 && cp /out/bin/vitjob-worker /out/install/bin/ \
 && { cp /out/lib/libvitjob_cuda.so /out/install/lib/ 2>/dev/null || true; } \
 && /out/install/bin/vitjob-worker --version

FROM ${RUNTIME_BASE}
ARG VERSION=0.1.0
ARG GIT_COMMIT=unknown
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      ca-certificates libcjson1 libyaml-0-2 libcurl4 libxml2 zlib1g libopenblas0-openmp \
      libsleef3 libgloo0 libgomp1 libisal2 libturbojpeg0 libjpeg62-turbo libspng0 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 vitjob \
 && useradd --system --uid 65532 --gid 65532 --create-home --home-dir /home/vitjob \
      --shell /usr/sbin/nologin vitjob
# bin/ and lib/ side by side: the worker finds its CUDA plugin at ../lib
COPY --from=build /out/install/ /opt/vitjob/
ENV PATH=/opt/vitjob/bin:$PATH
# OpenMP's idle threads sleep instead of spinning: a pod shares its node's
# cores (other pods, a CPU quota) and a spinning thread burns the quota its
# peers need; alone it costs a few percent at most (tests/run.sh's numbers).
# A pod's env may set another policy.
ENV OMP_WAIT_POLICY=PASSIVE
LABEL org.opencontainers.image.title="vitjob-worker" \
      org.opencontainers.image.description="vitjob's training worker: a Vision Transformer trained across pods" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.source="https://github.com/vitjob/vitjob" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
WORKDIR /home/vitjob
ENTRYPOINT ["/opt/vitjob/bin/vitjob-worker"]
