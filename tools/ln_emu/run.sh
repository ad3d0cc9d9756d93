#!/bin/bash
# tools/ln_emu/run.sh - builds tools/ln_emu/ln_emu.cc against the CPU twin
# (kernels/layernorm.c) and runs it: LayerNorm's one-pass backward checked
# on the CPU, thread by thread (tools/cuda_emu).
# Owns: that build, in its own directory. Must not: touch build/.
# usage: tools/ln_emu/run.sh [quick]        (build dir: LN_EMU_BUILD, default /tmp/ln_emu)
set -euo pipefail
cd "$(dirname "$0")/../.."
O=${LN_EMU_BUILD:-/tmp/ln_emu}
mkdir -p "$O"
CF="-O2 -g -march=native -fno-strict-aliasing -fopenmp -Ilib -Ikernels -Itools/cuda_emu"
gcc -std=c11 -D_POSIX_C_SOURCE=200809L $CF -c kernels/layernorm.c -o "$O/layernorm.o"
g++ -std=c++17 $CF -Wall -Wextra -Werror -Wno-unknown-pragmas -c tools/ln_emu/ln_emu.cc -o "$O/ln_emu.o"
g++ -fopenmp "$O/ln_emu.o" "$O/layernorm.o" -o "$O/ln_emu" -lm
OMP_NUM_THREADS=1 "$O/ln_emu" "$@"
