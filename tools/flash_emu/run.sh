#!/bin/bash
# tools/flash_emu/run.sh - builds tools/flash_emu/flash_emu.cc against the
# CPU twin (kernels/attention.c and what it needs) and runs it: the flash
# kernels' tile loops, masking and fragment bookkeeping checked on the CPU.
# Owns: that build, in its own directory. Must not: touch build/.
# usage: tools/flash_emu/run.sh [quick]        (BUILD dir: /tmp/flash_emu)
set -euo pipefail
cd "$(dirname "$0")/../.."
O=${FLASH_EMU_BUILD:-/tmp/flash_emu}
mkdir -p "$O"
BLAS_DIR=${BLAS_DIR:-/usr/lib/x86_64-linux-gnu/openblas-openmp}
CF="-O2 -g -march=native -fno-strict-aliasing -fopenmp -Ilib -Ikernels -Itools/cuda_emu"
gcc -std=c11 -D_POSIX_C_SOURCE=200809L $CF -c kernels/attention.c -o "$O/attention.o"
g++ -std=c++17 $CF -Wall -Wextra -Werror -Wno-unknown-pragmas -c tools/flash_emu/flash_emu.cc -o "$O/flash_emu.o"
# ops_cpu_attention_scratch_bytes lives in attention.c; ops_cpu_set_threads
# is the CPU backend's: a stand-in keeps this build to attention.c alone
cat > "$O/stub.c" <<'C'
#include <omp.h>
void ops_cpu_set_threads(int n) { omp_set_num_threads(n > 0 ? n : 1); }
C
gcc -std=c11 $CF -c "$O/stub.c" -o "$O/stub.o"
g++ -fopenmp "$O/flash_emu.o" "$O/attention.o" "$O/stub.o" -o "$O/flash_emu" \
    -L"$BLAS_DIR" -Wl,-rpath,"$BLAS_DIR" -lopenblas -lsleef -lm
"$O/flash_emu" "$@"
