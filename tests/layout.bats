#!/usr/bin/env bats
# tests/layout.bats - the module boundaries of the tree and of the binaries:
# worker/ and kernels/ never include operator/ and operator/ never includes
# worker/ or kernels/ (both use lib/ and api/); each program links only what
# it uses (no BLAS, SLEEF or OpenMP in the operator, whose image would carry
# them; no HTTP server in the worker; the S3 client and libxml2 in the worker
# only), and neither carries the other's code; every lib/ file opens with a
# comment naming itself; inside worker/, each folder includes only what its
# README allows; a module's private header (NAME_internal.h) is included
# only by its own files; only the strategies decide the sharding mode or
# name it; `make` alone builds every binary; docs/design.md's layout table
# names every folder; every string a log line carries goes through
# lib/log.h's one quoting (tests/log_lint.py); every program's main() first
# opens /dev/null onto closed descriptors 0, 1 and 2 (lib/stdfds.h); the
# Python under tests/ and bench/ imports the package tests, never edits its
# import path.
#
# BUILD (default build) points at the build tree.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

setup() {
  BUILD=${BUILD:-build}
  cd "$BATS_TEST_DIRNAME/.."
}

# headers of a directory and its folders, as #include "name.h" would name them
headers() { find "$1" \( -name '*.h' -o -name '*.cuh' \) -printf '%f\n' 2>/dev/null; }

# prints the files under $1 that include a header of $2..., or nothing
includes_of() {
  local from=$1; shift
  local h pattern=""
  for dir in "$@"; do
    for h in $(headers "$dir"); do pattern="$pattern|#include \"$h\""; done
  done
  grep -rlE "${pattern#|}" "$from" --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' || true
}

@test "operator/ includes nothing of worker/ or kernels/" {
  run includes_of operator worker kernels
  [ -z "$output" ] || { echo "$output"; false; }
}

@test "worker/ and kernels/ include nothing of operator/" {
  run includes_of worker operator
  [ -z "$output" ] || { echo "$output"; false; }
  run includes_of kernels operator
  [ -z "$output" ] || { echo "$output"; false; }
}

@test "lib/ and api/ include nothing of the programs" {
  run includes_of lib worker kernels operator
  [ -z "$output" ] || { echo "$output"; false; }
  run includes_of api worker kernels operator
  [ -z "$output" ] || { echo "$output"; false; }
}

@test "the operator links no BLAS, SLEEF, OpenMP runtime, gloo or C++ runtime" {
  run ldd "$BUILD/bin/vitjob-operator"
  [ "$status" -eq 0 ]
  [[ "$output" != *libopenblas* ]]
  [[ "$output" != *libsleef* ]]
  [[ "$output" != *libgomp* ]]
  [[ "$output" != *libgloo* ]]
  [[ "$output" != *libstdc++* ]]
  [[ "$output" == *libmicrohttpd* ]]
}

@test "the S3 client (lib/s3.c, libxml2) is the worker's: the operator has neither" {
  run nm --defined-only "$BUILD/bin/vitjob-worker"
  [[ "$output" == *" s3_put"* ]]
  run nm --defined-only "$BUILD/bin/vitjob-operator"
  [[ "$output" != *" s3_put"* ]]
  [[ "$output" != *" s3_new"* ]]
  run ldd "$BUILD/bin/vitjob-operator"
  [ "$status" -eq 0 ]
  [[ "$output" != *libxml2* ]]
}

@test "every lib/ file opens with a comment naming itself (lib/s3.c included)" {
  local f bad=""
  for f in lib/*.c lib/*.h; do
    head -1 "$f" | grep -qE "^/\* $f( |$)" || bad="$bad $f"
  done
  [ -z "$bad" ] || { echo "no opening comment naming the file:$bad"; false; }
  [ -f lib/s3.c ]
}

@test "the worker links no HTTP server, and gloo for its CPU collectives" {
  run ldd "$BUILD/bin/vitjob-worker"
  [ "$status" -eq 0 ]
  [[ "$output" != *libmicrohttpd* ]]
  [[ "$output" == *libopenblas* ]]
  [[ "$output" == *libgloo* ]]
}

@test "TurboJPEG and libspng: the worker and the tests that decode link them, the operator does not" {
  run ldd "$BUILD/bin/vitjob-worker"
  [[ "$output" == *libturbojpeg* && "$output" == *libspng* ]]
  run ldd "$BUILD/tests/test_decode"
  [[ "$output" == *libturbojpeg* && "$output" == *libspng* ]]
  run ldd "$BUILD/tests/test_loader"
  [[ "$output" == *libturbojpeg* && "$output" == *libspng* ]]
  run ldd "$BUILD/bin/vitjob-operator"
  [[ "$output" != *libturbojpeg* && "$output" != *libspng* ]]
}

@test "neither program carries the other's code" {
  run nm --defined-only "$BUILD/bin/vitjob-worker"
  [[ "$output" == *" train_run"* ]]
  [[ "$output" != *" vj_decide"* ]]
  [[ "$output" != *" controller_start"* ]]
  run nm --defined-only "$BUILD/bin/vitjob-operator"
  [[ "$output" == *" vj_decide"* ]]
  [[ "$output" != *" train_run"* ]]
  [[ "$output" != *" model_forward"* ]]
}

@test "the worker returns error classes, never exit codes: api/exitcode.c alone maps them" {
  run grep -rln 'VITJOB_EXIT_' worker kernels api/config*.c api/config*.h
  echo "$output"
  [ "$status" -eq 1 ]
}

@test "nothing points outside the repository: the design is docs/design.md" {
  local outside="\.\./sha""red"    # spelled apart so that this file does not match itself
  run git grep -nE "$outside" -- . ':!tests/layout.bats'
  [ -z "$output" ] || { echo "$output"; false; }
  [ -f docs/design.md ]
  # every line that mentions the design names where it is
  run bash -c "git grep -n 'design\.md' -- '*.c' '*.h' '*.cu' '*.py' '*.yaml' '*.md' \
               ':!docs/design.md' | grep -v 'docs/'"
  [ -z "$output" ] || { echo "every reference names docs/design.md:"; echo "$output"; false; }
}

@test "inside worker/: data/ and gang/ include nothing of the worker's, ckpt/ only gang/" {
  local bad=""
  bad+=$(includes_of worker/data worker/train worker/gang worker/ckpt worker/plan)
  bad+=$(includes_of worker/gang worker/train worker/ckpt worker/data worker/plan)
  bad+=$(includes_of worker/ckpt worker/train worker/data worker/plan)
  [ -z "$bad" ] || { echo "$bad"; false; }
}

@test "inside worker/: of plan/, train/ includes plan_memory.h alone, from train.c alone (the memory check)" {
  local found
  found=$(headers worker/plan | sed 's/.*/#include "&"/' |
          grep -rnFf - worker/train --include='*.c' --include='*.h' |
          grep -v '^worker/train/train\.c:[0-9]*:#include "plan_memory\.h"$' || true)
  [ -z "$found" ] || { echo "train/ includes of plan/:"; echo "$found"; false; }
}

@test "every folder of worker/ says in its README what it owns and what it must not touch" {
  local d bad=""
  for d in worker/*/; do
    grep -q "^Owns:" "$d/README.md" 2>/dev/null && grep -q "^Must not:" "$d/README.md" ||
      bad="$bad $d"
  done
  [ -z "$bad" ] || { echo "no README with Owns:/Must not: in$bad"; false; }
}

@test "only the data-parallel strategies (worker/train/dp*.c) decide on the sharding mode" {
  run bash -c "grep -rlE 'SHARDING_(NONE|GRAD_OP|FULL)|fsdp_' worker --include='*.c' --include='*.h' \
               | grep -vE '^worker/train/(dp[a-z_]*|fsdp)\.[ch]$'"
  [ -z "$output" ] || { echo "the sharding mode is tested outside the strategies:"; echo "$output"; false; }
  # nor by a mode's name: "grad-op" or "full" anywhere (strcmp(x, "full"), a
  # table of names), "none" in a comparison; the names are the strategies'
  # (dp_impl's name, dp_mode_name) and the config table's (api/config.c)
  run bash -c "grep -rnE '\"(grad-op|full)\"|cmp[^;]*\"none\"' worker \
               --include='*.c' --include='*.h' --include='*.cc' \
               | grep -vE '^worker/train/(dp[a-z_]*|fsdp)\.[ch]:'"
  [ -z "$output" ] || { echo "a sharding mode's name outside the strategies:"; echo "$output"; false; }
}

@test "plain make on a clean tree builds every binary (all is the default goal)" {
  local b; b=$(mktemp -d)
  run make -n BUILD="$b/b" NVCC= GO=
  rm -rf "$b"
  [ "$status" -eq 0 ]
  local bin
  for bin in vitjob-worker vitjob-operator vit_refcheck comm_bench ckpt_bench; do
    [[ "$output" == *"-o $b/b/bin/$bin "* ]] || { echo "make would not build $bin"; false; }
  done
  [[ "$output" == *"-o $b/b/tests/test_rdzv "* ]]
}

# A module's private header (DIR/NAME_internal.h) is what the files of that
# module share: only DIR/NAME.c and DIR/NAME_*.c may include it (tests too
# go through the module's public header).
@test "a private header (NAME_internal.h) is included only by its module's own files (NAME.c, NAME_*.c)" {
  local h dir name f bad="" n=0
  for h in $(git ls-files '*_internal.h'); do
    dir=$(dirname "$h"); name=$(basename "$h" _internal.h)
    n=$((n + 1))
    for f in $(git grep -l "#include \"$(basename "$h")\"" -- '*.c' '*.h' '*.cu' '*.cuh'); do
      case $f in "$dir/$name.c"|"$dir/$name"_*.c) ;; *) bad="$bad $f($h)" ;; esac
    done
  done
  echo "private headers: $n; included from elsewhere:${bad:- none}"
  [ "$n" -ge 2 ]
  [ -z "$bad" ]
}

@test "docs/design.md's layout table names every top-level folder" {
  local d missing=""
  for d in $(git ls-files | cut -d/ -f1 | sort -u); do
    [ -d "$d" ] || continue
    case "$d" in .*) continue ;; esac
    grep -qE "^\| *\`$d/\`" docs/design.md || missing="$missing $d"
  done
  [ -z "$missing" ] || { echo "not in docs/design.md's layout table:$missing"; false; }
}

@test "every string value of a log line goes through LOGV or LOGVF (tests/log_lint.py)" {
  run python3 tests/log_lint.py
  [ "$status" -eq 0 ] || { echo "$output"; false; }
}

@test "every program's main() calls stdfds_ensure before anything else" {
  local f bad=""
  for f in $(git grep -l '^int main(' -- '*.c' ':!tests/test_*.c'); do
    # the first statement of main, comments skipped
    awk '/^int main\(/ { m = 1; next } m && /^\{/ { next }
         m && !/^ *\/\*/ { print; exit }' "$f" | grep -q '^    stdfds_ensure(' || bad="$bad $f"
  done
  [ -z "$bad" ] || { echo "main() does not start with stdfds_ensure in:$bad"; false; }
}

@test "Python under tests/ and bench/ imports the package tests by name, never by editing its import path" {
  # tests/__init__.py: run as python3 -m tests.x.y from the root, or with the
  # root on PYTHONPATH set by the launcher
  run git grep -n 'sys[.]path' -- tests bench
  [ "$status" -eq 1 ] || { echo "$output"; false; }
}
