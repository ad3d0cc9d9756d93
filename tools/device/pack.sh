#!/bin/bash
# tools/device/pack.sh - packs this checkout's GPU programs for the device
# machine (the lent H100/H200), which has nvcc, PyTorch and timm but no apt.
#
# Owns: building, for any x86-64-v3 CPU, the programs that `make gpu-test`,
# `make bench-gpu` and a GPU training run need (tests/test_gpu_*,
# vitjob-worker, gpu_bench, data_order, the CUDA plugin); packing them with
# every shared library they load except glibc's, libstdc++, libgcc_s and NVIDIA's (the
# device machine has those) into .dev/prog.tar.xz and .dev/syslib.tar.xz;
# and a Fashion-MNIST subset (20,000 training images, the t10k test set) in
# .dev/fmnist (and 2,000 + 256 images in .dev/fmnist-s for the sanitizers'
# runs). .dev/ is listed in .git/info/exclude; the device call carries
# it: `run` with carry [".dev"] and `bash tools/device/run.sh BUDGET_S`.
# Must not: touch build/ (it builds in its own tree) or anything tracked.
#
# usage: tools/device/pack.sh [BUILD_DIR]     (default /tmp/vj-devbuild)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-/tmp/vj-devbuild}
D=.dev
EXCLUDE=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$EXCLUDE")"
grep -qx '/.dev/' "$EXCLUDE" 2>/dev/null || echo '/.dev/' >> "$EXCLUDE"

make -j"$(nproc)" BUILD="$B" ARCH=-march=x86-64-v3 "$B/bin/vitjob-worker" "$B/bin/gpu_bench" "$B/bin/data_order" \
    "$B/tests/test_gpu_ops" "$B/tests/test_gpu_train" "$B/tests/test_gpu_dp" "$B/lib/libvitjob_cuda.so"

rm -rf "$D" && mkdir -p "$D"
S=$(mktemp -d); trap 'rm -rf "$S"' EXIT
mkdir -p "$S/prog/bin" "$S/prog/tests" "$S/prog/lib" "$S/syslib"
cp "$B/bin/vitjob-worker" "$B/bin/gpu_bench" "$B/bin/data_order" "$S/prog/bin/"
cp "$B/tests/test_gpu_ops" "$B/tests/test_gpu_train" "$B/tests/test_gpu_dp" "$S/prog/tests/"
cp "$B/lib/libvitjob_cuda.so" "$S/prog/lib/"
for f in "$S"/prog/bin/* "$S"/prog/tests/*; do ldd "$f"; done | awk '/=>/ {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so' |
    xargs -r -I{} cp -L {} "$S/syslib/"
tar -C "$S/prog" -cJf "$D/prog.tar.xz" .
tar -C "$S/syslib" -cJf "$D/syslib.tar.xz" .

python3 tests/fmnist_subset.py "$D/fmnist" --train 20000 --test all --level 6
# the sanitizers' runs: a few steps and an evaluation of 256 images
python3 tests/fmnist_subset.py "$D/fmnist-s" --train 2000 --test 256 --level 6
du -sh "$D"/* && du -sh "$D"
