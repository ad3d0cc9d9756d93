#!/usr/bin/env bash
# tests/run.sh BUILD - runs every test suite of vitjob against the build tree
# BUILD (default: build) and its sanitizer twin BUILD/asan, and prints one
# line per suite and a closing "N passed, N failed" line (", N skipped (why)"
# added where Criterion tests skipped, e.g. the GPU suites without a GPU:
# skipped tests are not counted as passed). Each suite's line ends with its
# seconds and CPU seconds, and the five slowest suites and the CPU used in
# all are given at the end, so that where the time goes is visible. Exits
# non-zero if anything failed. The suites that mostly wait run in a lane
# beside the others, and a lane done with its own suites takes the next
# from a queue the lanes share (see "The lanes" below; TEST_LANES=1: one
# lane, TEST_LANES=3: three), the other lanes' lines printed when the main
# lane is done.
#
#   unit (C, Criterion):   tests/test_*.c            one per source file, named for it
#                                                    (test_config.c: api/config.c, ...);
#                                                    the GPU suites skip without a GPU
#   command line (bats):   tests/worker.bats         exit codes, messages, determinism
#                          tests/schema.bats         the CRD, its chart copy, the README's key
#                                                    table and docs/design.md's summary and exit
#                                                    codes are what `make schema` writes
#                          tests/stdfds.bats         the programs started with 0, 1 or 2 closed
#                          tests/operator.bats       the operator's flags: the chart's args are in its table
#                          tests/ranks.bats          many ranks on loopback: sharding, peers lost
#                          tests/lostpeer.bats       the heartbeat: a rank killed, frozen, or woken stale
#                          tests/plan.bats           `plan`: each rank's peak memory against the plan
#                          tests/ckpt.bats           checkpoints and resume, on file:// and on S3 (moto)
#                          tests/fence.bats          a frozen older generation writes no checkpoint (file, S3)
#                          tests/regularization.bats dropPath and labelSmoothing over ranks and resume
#                          tests/ema.bats            training.ema over ranks, resume, evaluation, export
#                          tests/fp16.bats           fp16-mixed: loss scaling, skipped steps over ranks and resume
#                          tests/freeze.bats         training.freeze: frozen weights unchanged, over
#                                                    ranks in every sharding mode, and resume
#                          tests/data.bats           training on webdataset shards, on file:// and on S3 (moto)
#                          tests/shardwriter.bats    `shards`: webdataset shards from IDX or a folder, file and S3
#   layout (bats):         tests/layout.bats         module boundaries, what each binary links
#                          tests/limits.bats         every test has a time limit, and it works
#   reference (PyTorch):   tests/ref/check_against_torch.py, fp32 and fp64 references
#                          tests/transform.bats      the image transforms against torch
#                                                    and torchvision
#                          tests/mixup.bats          mixup and cutmix against torch; training
#                                                    with them at 2 ranks, resumed bit for bit
#                          tests/randaug.bats        RandAugment and random erasing against
#                                                    PIL and torch; training with them
#   learning (bats):       tests/learning.bats       accuracy on Fashion-MNIST, export
#                          tests/finetune.bats       the seed article's finetuning story
#                                                    (pretrain, export, finetune at 32x32
#                                                    against scratch, a probe), model.init
#                                                    from files and checkpoints, and the
#                                                    finetuning pieces against torch
#   cluster (unittest):    tests/cluster/test_*.py   the test API server: protocol, what a
#                                                    real server refuses (parity), the
#                                                    real kubectl against it, and the
#                                                    operator end to end, its
#                                                    admission plan (test_admission.py); the
#                                                    controller-manager stand-in; the
#                                                    whole product on a local cluster
#                                                    (kubelets, node loss, resume);
#                                                    recovery at upstream node-lifecycle
#                                                    defaults
#                                                    (test_recovery.py); the example
#                                                    ViTJobs: unique names, cpu/ and gpu/,
#                                                    the CPU ones fit the local nodes
#                                                    (test_examples.py)
#   docs (unittest):       tests/cluster/test_docs.py every marked shell block of
#                                                    README.md and docs/user-guide.md
#                                                    run (here or on the local
#                                                    cluster), synopses against --help
#   chart (unittest):      tests/chart/test_chart.py the Helm chart rendered (tools/
#                                                    helmrender), dry-run applied, the
#                                                    schema's refusals, installed and run
#   the same C suites, the worker CLI, the reference check and the operator end
#   to end under ASan + UBSan
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ASAN=$BUILD/asan
PY=/usr/bin/python3
WORK=$(mktemp -d)
# TEST_LOGS=DIR keeps every suite's log (bats' with each test's
# milliseconds) in DIR instead of removing them with the rest
trap '[ -n "${TEST_LOGS:-}" ] && mkdir -p "$TEST_LOGS" && cp "$WORK"/*.log "$TEST_LOGS"/; rm -rf "$WORK"' EXIT

passed=0 failed=0 skipped=0 failures=()
# Time limits, so that a regression that hangs fails in minutes and names
# itself: every test has its own (Criterion's --timeout; BATS_TEST_TIMEOUT,
# set at the top of each .bats file; tests/cluster/testlimit.py's alarm in
# each Python module), and each suite as a whole is stopped at SUITE_LIMIT
# (a hang outside any test: a setup_file, a setUpClass, a script).
# OpenMP's threads (the CPU ops, OpenBLAS) sleep at once when they have
# nothing to do, as in the worker image (docker/worker.Dockerfile), instead of
# libgomp's default of spinning first: the suites here share two cores with
# each other (Criterion's -j2, many ranks, the waiting lane), and a spinning
# thread then holds the core its peer needs. Seen on 2 cores: test_model at
# -j2 87 s spinning, 1.4 s sleeping; two 100-step trainings at once 41.5 s
# against 9.5 s; one training alone 7.8 s against 8.0 s. Results are the same
# bits either way (static schedules).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# With three lanes (TEST_LANES=3), two lanes of trainings share two cores:
# the command-line and script suites' processes then take one compute
# thread each (OMP_NUM_THREADS=1). A small model gains nothing from a
# second thread here: fmnist_tiny, 150 steps alone, 6.9 s at one thread
# (8.6 CPU s), 7.8 s at two (16.3 CPU s); two one-thread runs at once take
# 6.4 and 6.5 s. With two lanes the second core is mostly free and the
# worker picks its threads itself (fmnist_small: 1.7x faster at two).
# TEST_THREADS=N sets a count for every lane, TEST_THREADS= leaves it to
# the worker. The C suites keep the default either way, so that the ops'
# threaded loops are run (and sanitized); tests that need a count set
# training.threads.
TEST_LIMIT=${TEST_LIMIT:-300}
SUITE_LIMIT=${SUITE_LIMIT:-1200}
# limited CMD...: CMD under SUITE_LIMIT (TERM, then KILL 10 s later), in a
# subshell that leaves the CPU milliseconds CMD used in $CPU_FILE (for note;
# a lane's own file: a lane's shell also reaps the lanes it started, which
# are no suite's)
limited() {
  ( timeout -k 10 "$SUITE_LIMIT" "$@"; rc=$?; cpu_now; echo "$CPU_MS" > "$CPU_FILE"; exit "$rc" )
}
# past_limit RC LOG: notes in LOG, and says, when RC is timeout's
past_limit() {
  if [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; then
    echo "the suite ran past its limit of ${SUITE_LIMIT}s and was stopped" | tee -a "$2"
  fi
}
TIMES=$WORK/times # one line per suite: SECONDS NAME
suite_start=$(date +%s)
# cpu_now: sets CPU_MS to the CPU milliseconds (user + system) of this
# shell's finished children so far (bash's times, written to a file: in a
# pipe or $(...) it would run in a child and see none; a lane is its own
# shell and counts its own)
cpu_ms() { local m=${1%%m*} f=${1#*m}; f=${f%s}; echo $(( m * 60000 + 10#${f%.*} * 1000 + 10#${f#*.} )); }
cpu_now() {
  local u s
  times > "$WORK/times.$BASHPID"
  { read -r _ _; read -r u s; } < "$WORK/times.$BASHPID"
  CPU_MS=$(( $(cpu_ms "$u") + $(cpu_ms "$s") ))
}
CPU_FILE=$WORK/cpu.main
# suite_line NAME RESULT SECS CPU_SECS: a suite's line as note prints it
suite_line() { printf '%-44s %-40s %5ds %5ds cpu\n' "$@"; }
# note NAME RESULT: the suite's line, with the seconds since the last note
# and the CPU seconds its processes used (next to the wall-clock seconds:
# how many of the machine's cores the suite kept busy)
note() {
  local now secs used=0; now=$(date +%s); secs=$((now - suite_start)); suite_start=$now
  if [ -s "$CPU_FILE" ]; then used=$(( $(cat "$CPU_FILE") / 1000 )); rm -f "$CPU_FILE"; fi
  suite_line "$1" "$2" "$secs" "$used"
  echo "$secs $1 ($used s cpu)" >> "$TIMES"
}

# criterion_suite NAME BINARY [sanitized]: counts from Criterion's synthesis line,
# skips from its TAP report (the synthesis line leaves skipped tests out of
# every count, Passing included)
criterion_suite() {
  local name=$1 bin=$2 log=$WORK/${1//\//_}.log tap=$WORK/${1//\//_}.tap
  limited "$bin" --no-early-exit -j2 --timeout "$TEST_LIMIT" --tap="$tap" > "$log" 2>&1
  local rc=$?
  past_limit "$rc" "$log"
  local s why=""
  s=$(grep -ac '# SKIP' "$tap" 2>/dev/null); s=${s:-0}
  if [ "$s" -gt 0 ]; then
    why=$(sed -n 's/.*# SKIP //p' "$tap" | sort | uniq -c | sort -rn | head -1 | sed 's/^ *[0-9]* //')
    why=", $s skipped ($why)"
    skipped=$((skipped + s))
  fi
  local synth; synth=$(grep -a 'Synthesis:' "$log" | tail -1)
  local p f c
  p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$synth")
  f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$synth")
  c=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$synth")
  p=${p:-0} f=${f:-0} c=${c:-0}
  # Criterion only prints sanitizer reports; they must fail the suite.
  if grep -aqE 'LeakSanitizer|AddressSanitizer|runtime error' "$log"; then
    f=$((f + 1)); rc=1
  fi
  if [ -z "$synth" ] || [ "$rc" -ne 0 ] && [ $((f + c)) -eq 0 ]; then f=$((f + 1)); fi
  passed=$((passed + p)); failed=$((failed + f + c))
  note "$name" "$p passed, $((f + c)) failed$why"
  if [ $((f + c)) -ne 0 ]; then failures+=("$name"); grep -aE 'FAIL|CRASH|Assertion|Sanitizer|runtime error|ERROR' "$log" | head -20; fi
}

# bats_suite NAME FILE [env...]: counts from the TAP lines
bats_suite() {
  local name=$1 file=$2; shift 2
  local log=$WORK/${name//\//_}.log
  limited env "${THREAD_ENV[@]}" "$@" bats --tap --timing "$file" > "$log" 2>&1
  local rc=$? p f
  past_limit "$rc" "$log"
  p=$(grep -c '^ok ' "$log"); f=$(grep -c '^not ok ' "$log")
  if grep -qE 'LeakSanitizer|AddressSanitizer|runtime error' "$log"; then f=$((f + 1)); fi
  if { [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; } || { [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; }; then f=1; fi
  passed=$((passed + p)); failed=$((failed + f))
  note "$name" "$p passed, $f failed"
  if [ "$f" -ne 0 ]; then failures+=("$name"); grep -A12 '^not ok' "$log" | head -60; fi
}

# unittest_suite NAME FILE [VAR=value...]: a Python unittest module, counted
# from its summary; run as a module of the package tests (tests/__init__.py:
# tests/cluster/test_x.py is python3 -m tests.cluster.test_x, from the root)
unittest_suite() {
  local name=$1 file=$2; shift 2
  local log=$WORK/${name//\//_}.log module=${file%.py}
  limited env "$@" "$PY" -m "${module//\//.}" -v > "$log" 2>&1
  local rc=$? ran f
  past_limit "$rc" "$log"
  ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\}.*/\1/p' "$log" | tail -1)
  ran=${ran:-0}
  f=$(( $(grep -cE '^(FAIL|ERROR):' "$log") ))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  if [ "$ran" -eq 0 ]; then f=$((f > 0 ? f : 1)); fi
  # skipped tests (unittest's "OK (skipped=N)") are not passed: counted apart, with why
  local s why=""
  s=$(sed -n 's/.*skipped=\([0-9]*\).*/\1/p' "$log" | tail -1); s=${s:-0}
  if [ "$s" -gt 0 ]; then
    why=", $s skipped ($(sed -n "s/.*skipped '\(.*\)'$/\1/p" "$log" | sort | uniq -c | sort -rn | head -1 | sed 's/^ *[0-9]* //'))"
    skipped=$((skipped + s))
  fi
  local p=$((ran - f - s < 0 ? 0 : ran - f - s))
  passed=$((passed + p)); failed=$((failed + f))
  note "$name" "$p passed, $f failed$why"
  if [ "$f" -ne 0 ]; then failures+=("$name"); grep -B2 -A20 -E '^(FAIL|ERROR):' "$log" | head -80; tail -5 "$log"; fi
}

# script_suite NAME CMD...: one check that passes when CMD exits 0
script_suite() {
  local name=$1; shift
  local log=$WORK/${name//\//_}.log
  limited env "${THREAD_ENV[@]}" "$@" > "$log" 2>&1
  local rc=$?
  past_limit "$rc" "$log"
  if [ "$rc" -eq 0 ] && ! grep -qE 'LeakSanitizer|AddressSanitizer|runtime error' "$log"; then
    passed=$((passed + 1)); note "$name" "1 passed, 0 failed"
  else
    failed=$((failed + 1)); failures+=("$name"); note "$name" "0 passed, 1 failed"; tail -30 "$log"
  fi
  grep -E '^PASS|tensors compared' "$log" | tail -1
}

# python3 once resolved: where it is a version manager's shim (pyenv's runs
# bash scripts at every call: 0.41 s of CPU a call against 0.08 for the
# interpreter, measured), the suites' many python3 calls (S3 clients, JSON
# checks) go straight to the interpreter it resolves to here, through a link
# first on PATH: the same Python and packages, without the shim (ckpt.bats
# on S3: 85 -> 65 CPU s)
real_py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
if [ -n "$real_py" ] && [ -x "$real_py" ] && [ "$(command -v python3)" != "$real_py" ]; then
  mkdir -p "$WORK/bin" && ln -s "$real_py" "$WORK/bin/python3" && export PATH="$WORK/bin:$PATH"
fi

start=$(date +%s)
suite_start=$start
# protect_shadow_gap=0: the CUDA driver maps memory where ASan's shadow gap
# would be, so with a GPU present the sanitized binaries need it to start CUDA.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1:protect_shadow_gap=0
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan-cuda.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# The sanitizer tree. `make test` builds BUILD first and gives the command
# that builds BUILD/asan in ASAN_MAKE: it runs here, beside the suites that
# do not need it, at a lower priority (nice 10: it takes the cores the
# suites leave idle, mostly while the waiting lane waits), instead of before
# them all (111 s of 2 cores on a clean tree). The sanitized suites wait for
# it (asan_wait); its result is the line asan/build. Without ASAN_MAKE the
# tree is used as it is (missing: one failure, asan/build).
ASAN_LOCK=$WORK/asan.lock ASAN_RC=$WORK/asan-build.rc
if [ -n "${ASAN_MAKE:-}" ]; then
  # the builder holds the lock until it ends: a waiter's flock returns then
  exec 9> "$ASAN_LOCK"
  flock 9
  ( t0=$(date +%s)
    nice -n 10 bash -c "$ASAN_MAKE" > "$WORK/asan-build.log" 2>&1 9>&-
    rc=$?; cpu_now
    echo "$rc $(( $(date +%s) - t0 )) $(( CPU_MS / 1000 ))" > "$ASAN_RC" ) &
  exec 9>&-
fi
# asan_expected: true when this run has (or builds) the sanitizer tree
asan_expected() { [ -n "${ASAN_MAKE:-}" ] || [ -d "$ASAN/tests" ]; }
# asan_wait: waits for the sanitizer build when this run builds it (a line,
# asan/build-wait, takes the seconds waited); true when the tree is usable
asan_wait() {
  if [ -n "${ASAN_MAKE:-}" ]; then
    if [ ! -s "$ASAN_RC" ]; then
      flock "$ASAN_LOCK" true
      note asan/build-wait "waited for the sanitizer build"
    fi
    [ "$(cut -d' ' -f1 "$ASAN_RC" 2>/dev/null)" = 0 ]
  else
    [ -d "$ASAN/tests" ]
  fi
}
# asan_suite FUNCTION ARG...: a sanitized suite, once the tree is built (when
# the build failed, asan/build is the failure and the suite is not run)
asan_suite() { asan_wait && "$@"; return 0; }
# asan_build: the line of the sanitizer tree's build (queued once): its
# seconds and CPU seconds beside the suites, or the failure and its log (or
# one failure when the tree is missing and this run does not build it)
asan_build() {
  if [ -z "${ASAN_MAKE:-}" ]; then
    [ -d "$ASAN/tests" ] && return 0
    failed=$((failed + 1)); failures+=("asan build missing ($ASAN)"); note asan "missing build"; return 0
  fi
  asan_wait
  local rc secs cpu; read -r rc secs cpu < "$ASAN_RC"
  if [ "$rc" = 0 ]; then
    suite_line asan/build "built beside the suites (nice 10)" "$secs" "$cpu"
  else
    failed=$((failed + 1)); failures+=(asan/build)
    suite_line asan/build "the build failed (exit $rc)" "$secs" "$cpu"
    tail -30 "$WORK/asan-build.log"
  fi
}

# The lanes. The suites run in lanes side by side, each a shell of its own
# with its own counts, whose lines are printed when it is done (the main
# lane's as they come):
# - the main lane: the C suites and the worker's command-line suites;
# - the waiting lane: the suites that mostly wait (on an API server's
#   watches, leases and grace periods; a quarter of a core or less on
#   average), and the C suites that mostly sleep (timeouts, heartbeats,
#   deadlines: 1-2 s of CPU in 5-32 s), in both builds (the sanitized ones
#   after the cluster suites: the sanitizer tree may still be building);
# - the queue (queue_suites): the learning and reference suites and the
#   sanitizer build's, longest first. Every lane, its own suites done, takes
#   the next queued suite until none is left, so the lanes end close
#   together; TEST_LANES=3 adds a second lane that only takes from it.
# Most suites keep about one core busy (bats runs one test at a time, and a
# small model's training is mostly one thread). On two cores (each suite's
# line gives its CPU seconds), with the queue run by the main lane after
# its own suites (as before the queue): 2,854 CPU seconds in 1,965 s (a CI
# run at bcaa119), the waiting lane done after about 1,160 s, so that one
# core was mostly idle for the last 13 minutes. With the queue: 2,898 CPU
# seconds in 1,766 s (10c92ad), both lanes ending within 12 s. Three lanes (the
# queue a lane of its own from the start) took 1,858-1,862 s with
# 3,290-3,343 CPU seconds at one thread a training (c0c19be): three lanes
# of work on two cores from the start, the cluster suites' waits included.
# The three-lane runs found three tests whose outcome hung on timing (since
# fixed: test_report's count of writes per interval, test_recovery's frozen
# rank, test_controllers' read-modify-write of a Deployment); two lanes
# stay the default, three a way to find such tests. The others' outcomes
# do not hang on what runs beside them: each waits for events with limits
# far above what it takes, and asserts the order of events, not their
# times. So that the lanes never race for a loopback port, each draws its
# ports (tests/rank_fixture.h, ranks_helpers.bash's free_port) from a range
# of its own (VITJOB_TEST_PORTS), whichever suites it runs: main
# 20000-22999 (20000-25999 with two lanes), second 23000-25999, waiting
# 26000-31999; the cluster suites bind ports the kernel picks (32768 and
# up). TEST_LANES=1 runs everything in line.
# waiting_unit TEST: TEST is one of the waiting lane's C suites (with one
# lane, none is: the loops run them in their places)
WAITING_UNITS=" test_heartbeat test_rdzv test_jobplan test_report "
waiting_unit() { [ "$LANES" -ge 2 ] && [[ "$WAITING_UNITS" == *" $(basename "$1") "* ]]; }

main_lane() {
  for t in "$BUILD"/tests/test_*; do
    waiting_unit "$t" && continue
    criterion_suite "unit/$(basename "$t")" "$t"
  done
  bats_suite cli/worker.bats tests/worker.bats BUILD="$BUILD"
  bats_suite cli/schema.bats tests/schema.bats BUILD="$BUILD"
  bats_suite cli/stdfds.bats tests/stdfds.bats BUILD="$BUILD"
  bats_suite cli/operator.bats tests/operator.bats BUILD="$BUILD"
  bats_suite cli/ranks.bats tests/ranks.bats BUILD="$BUILD"
  bats_suite cli/lostpeer.bats tests/lostpeer.bats BUILD="$BUILD"
  bats_suite cli/plan.bats tests/plan.bats BUILD="$BUILD"
  bats_suite cli/ckpt.bats tests/ckpt.bats BUILD="$BUILD" CK_BACKEND=file
  bats_suite cli/ckpt-s3.bats tests/ckpt.bats BUILD="$BUILD" CK_BACKEND=s3
  bats_suite cli/fence.bats tests/fence.bats BUILD="$BUILD" CK_BACKEND=file
  bats_suite cli/fence-s3.bats tests/fence.bats BUILD="$BUILD" CK_BACKEND=s3
  bats_suite cli/regularization.bats tests/regularization.bats BUILD="$BUILD"
  bats_suite cli/ema.bats tests/ema.bats BUILD="$BUILD"
  bats_suite cli/fp16.bats tests/fp16.bats BUILD="$BUILD"
  bats_suite cli/freeze.bats tests/freeze.bats BUILD="$BUILD"
  bats_suite cli/shardwriter.bats tests/shardwriter.bats BUILD="$BUILD"
  bats_suite cli/data.bats tests/data.bats BUILD="$BUILD" DATA_BACKEND=file
  bats_suite cli/data-s3.bats tests/data.bats BUILD="$BUILD" DATA_BACKEND=s3
  bats_suite layout/layout.bats tests/layout.bats BUILD="$BUILD"
  bats_suite layout/limits.bats tests/limits.bats
  take_queued
}

# The queue: one file per queued suite, its call one word a line, named so
# that the files sort in the order they are taken. A lane claims a suite by
# renaming its file into the lane's own folder: rename is atomic, so two
# lanes never both take one.
QUEUE=$WORK/queue
mkdir -p "$QUEUE"
queued=0
# enqueue FUNCTION ARG...: queues the suite call FUNCTION ARG...
enqueue() {
  queued=$((queued + 1))
  printf '%s\n' "$@" > "$QUEUE/$(printf '%03d' "$queued")"
}
# take_queued: runs queued suites, the next first, until none is left
take_queued() {
  local f mine=$WORK/taken.$BASHPID call
  mkdir -p "$mine"
  for f in "$QUEUE"/*; do
    mv "$f" "$mine/" 2>/dev/null || continue   # another lane took it (or none was queued)
    mapfile -t call < "$mine/${f##*/}"
    "${call[@]}"
  done
}

# queue_suites: the queue's suites, the longest first (measured alone: 150,
# 140 and 95 s), so that no long suite starts last
queue_suites() {
  enqueue bats_suite learning/learning.bats tests/learning.bats BUILD="$BUILD"
  enqueue bats_suite learning/finetune.bats tests/finetune.bats BUILD="$BUILD"
  enqueue asan_build
  if asan_expected; then
    enqueue asan_suite bats_suite asan/cli/worker.bats tests/worker.bats BUILD="$BUILD" WORKER="$ASAN/bin/vitjob-worker"
  fi
  enqueue bats_suite reference/transform.bats tests/transform.bats BUILD="$BUILD"
  enqueue bats_suite reference/mixup.bats tests/mixup.bats BUILD="$BUILD"
  enqueue bats_suite reference/randaug.bats tests/randaug.bats BUILD="$BUILD"
  enqueue script_suite reference/pytorch "$PY" -m tests.ref.check_against_torch \
    --bin "$BUILD/bin/vit_refcheck" --workdir "$WORK/ref" --quiet
  # the same fp32 engine against PyTorch in float64: the 1e-4 bound holds
  # against the exact math too, not only against another fp32 rounding. The
  # EMA is an average of fp32 weights that are themselves within 1e-4 of the
  # float64 ones, so it is held to the weights' bound here (its own update,
  # 1e-5, is checked against the float32 reference above)
  enqueue script_suite reference/pytorch-float64 "$PY" -m tests.ref.check_against_torch \
    --bin "$BUILD/bin/vit_refcheck" --workdir "$WORK/ref64" --ref-dtype float64 --ema-tol 1e-4 --quiet
  # the trainer's Fashion-MNIST order (build/bin/data_order) and a model.init
  # file, replayed by PyTorch: the first 20 fp32 steps from the same weights on
  # the same batches give the same losses (measured 3.9e-7 apart); the wiring
  # of tests/ref/bf16_vs_torch.py, whose GPU run compares bf16 against autocast
  enqueue script_suite reference/same-order "$PY" -m tests.ref.bf16_vs_torch --worker "$BUILD/bin/vitjob-worker" \
    --order "$BUILD/bin/data_order" --workdir "$WORK/same-order" --preset fmnist_tiny --check-only \
    --check-steps 20 --check-tol 1e-4 --threads 1
  # the flash-attention kernels' own source (kernels/flash_attention.cuh) run
  # on the CPU, thread by thread, against the CPU twin (tools/flash_emu): their
  # tiles, masks and fragments checked where no GPU is
  enqueue script_suite reference/flash_emu env FLASH_EMU_BUILD="$WORK/flash_emu" tools/flash_emu/run.sh quick
  # the same for LayerNorm's one-pass backward (kernels/layernorm_onepass.cuh,
  # a candidate kernel) against its CPU twin (tools/ln_emu)
  enqueue script_suite reference/ln_emu env LN_EMU_BUILD="$WORK/ln_emu" tools/ln_emu/run.sh quick
  if asan_expected; then
    # the sanitizer tree's tests are the same as BUILD's (it may not be built yet)
    for t in "$BUILD"/tests/test_*; do
      waiting_unit "$t" && continue
      enqueue asan_suite criterion_suite "asan/unit/$(basename "$t")" "$ASAN/tests/$(basename "$t")"
    done
    enqueue asan_suite bats_suite asan/cli/schema.bats tests/schema.bats BUILD="$BUILD" WORKER="$ASAN/bin/vitjob-worker"
    enqueue asan_suite bats_suite asan/cli/shardwriter.bats tests/shardwriter.bats BUILD="$BUILD" WORKER="$ASAN/bin/vitjob-worker"
    enqueue asan_suite bats_suite asan/cli/stdfds.bats tests/stdfds.bats BUILD="$BUILD" WORKER="$ASAN/bin/vitjob-worker" \
      OPERATOR="$ASAN/bin/vitjob-operator"
    enqueue asan_suite bats_suite asan/cli/operator.bats tests/operator.bats BUILD="$BUILD" OPERATOR="$ASAN/bin/vitjob-operator"
    enqueue asan_suite bats_suite asan/reference/transform.bats tests/transform.bats BUILD="$BUILD" XF_CHECK="$ASAN/bin/xf_check"
    enqueue asan_suite bats_suite asan/reference/randaug.bats tests/randaug.bats BUILD="$BUILD" RA_CHECK="$ASAN/bin/ra_check" \
      WORKER="$ASAN/bin/vitjob-worker"
    # the sanitizer build (-O1, other roundings) against the float32
    # reference: its weights land within 1e-4, and the EMA, an average of
    # them, is held to that bound too (the 1e-5 of the EMA's own update is
    # the normal build's, above)
    enqueue asan_suite script_suite asan/reference/pytorch "$PY" -m tests.ref.check_against_torch \
      --bin "$ASAN/bin/vit_refcheck" --workdir "$WORK/ref-asan" --ema-tol 1e-4 --quiet
  fi
}

# second_lane (TEST_LANES=3): takes from the queue from the start
second_lane() { take_queued; }

waiting_lane() {
  for t in "$BUILD"/tests/test_*; do
    waiting_unit "$t" && criterion_suite "unit/$(basename "$t")" "$t"
  done
  unittest_suite cluster/test_apiserver tests/cluster/test_apiserver.py
  unittest_suite cluster/test_apply tests/cluster/test_apply.py
  unittest_suite cluster/test_apiserver_parity tests/cluster/test_apiserver_parity.py
  unittest_suite cluster/test_defaults tests/cluster/test_defaults.py
  unittest_suite cluster/test_kubectl tests/cluster/test_kubectl.py BUILD="$BUILD"
  unittest_suite cluster/test_operator tests/cluster/test_operator.py BUILD="$BUILD"
  unittest_suite cluster/test_admission tests/cluster/test_admission.py BUILD="$BUILD"
  unittest_suite cluster/test_controllers tests/cluster/test_controllers.py
  unittest_suite cluster/test_kueue tests/cluster/test_kueue.py
  unittest_suite cluster/test_kubelet tests/cluster/test_kubelet.py
  unittest_suite cluster/test_e2e tests/cluster/test_e2e.py BUILD="$BUILD"
  unittest_suite cluster/test_recovery tests/cluster/test_recovery.py BUILD="$BUILD"
  unittest_suite cluster/test_kueue_operator tests/cluster/test_kueue_operator.py BUILD="$BUILD"
  unittest_suite cluster/test_elastic tests/cluster/test_elastic.py BUILD="$BUILD"
  unittest_suite cluster/test_examples tests/cluster/test_examples.py
  # the docs run (about half a minute; the local cluster, in line with the
  # suites above that start it): a limit of its own, well under the others'
  SUITE_LIMIT=${DOCS_LIMIT:-600} unittest_suite cluster/test_docs tests/cluster/test_docs.py BUILD="$BUILD"
  unittest_suite chart/test_chart tests/chart/test_chart.py BUILD="$BUILD"
  # the sanitized ones last: the sanitizer tree is built beside the suites above
  if asan_expected; then
    for t in "$BUILD"/tests/test_*; do
      waiting_unit "$t" && asan_suite criterion_suite "asan/unit/$(basename "$t")" "$ASAN/tests/$(basename "$t")"
    done
    asan_suite unittest_suite asan/cluster/test_operator tests/cluster/test_operator.py BUILD="$ASAN"
    asan_suite unittest_suite asan/cluster/test_admission tests/cluster/test_admission.py BUILD="$ASAN"
  fi
  take_queued
}

# start_lane NAME PORTS: runs NAME_lane in the background, in a shell of its
# own with its counts from zero, its ports PORTS and its lines kept for
# finish_lane; sets LANE_PID
start_lane() {
  ( passed=0 failed=0 skipped=0 failures=() CPU_FILE=$WORK/cpu.$1 suite_start=$(date +%s)
    export VITJOB_TEST_PORTS=$2
    "$1_lane"
    { echo "$passed $failed $skipped"; printf '%s\n' "${failures[@]}"; } > "$WORK/$1.counts"
  ) > "$WORK/$1.out" 2>&1 &
  LANE_PID=$!
}
# finish_lane NAME PID: waits for the lane, prints its lines and adds its counts
finish_lane() {
  wait "$2"
  echo "# the $1 lane, run beside the main lane:"
  cat "$WORK/$1.out"
  if [ -s "$WORK/$1.counts" ]; then
    local lp lf ls x lfail
    { read -r lp lf ls; mapfile -t lfail; } < "$WORK/$1.counts"
    passed=$((passed + lp)); failed=$((failed + lf)); skipped=$((skipped + ls))
    for x in "${lfail[@]}"; do [ -n "$x" ] && failures+=("$x"); done
  else
    failed=$((failed + 1)); failures+=("the $1 lane (no counts)")
  fi
}

LANES=${TEST_LANES:-2}
THREAD_ENV=()
if [ -n "${TEST_THREADS+set}" ]; then
  [ -z "$TEST_THREADS" ] || THREAD_ENV=(OMP_NUM_THREADS="$TEST_THREADS")
elif [ "$LANES" -ge 3 ]; then
  THREAD_ENV=(OMP_NUM_THREADS=1)
fi
queue_suites
waiting_pid= second_pid=
if [ "$LANES" -ge 2 ]; then start_lane waiting 26000-31999; waiting_pid=$LANE_PID; fi
if [ "$LANES" -ge 3 ]; then start_lane second 23000-25999; second_pid=$LANE_PID; fi
case $LANES in 1) export VITJOB_TEST_PORTS=20000-31999 ;; 2) export VITJOB_TEST_PORTS=20000-25999 ;;
  *) export VITJOB_TEST_PORTS=20000-22999 ;; esac
main_lane
[ -z "$second_pid" ] || finish_lane second "$second_pid"
if [ -n "$waiting_pid" ]; then finish_lane waiting "$waiting_pid"; else waiting_lane; fi

elapsed=$(( $(date +%s) - start ))
echo "elapsed: ${elapsed}s; the five slowest suites:"
sort -rn "$TIMES" | head -5 | while read -r secs name; do printf '  %5ds  %s\n' "$secs" "$name"; done
cpu_now
# the sanitizer build beside the suites is counted on its own line (asan/build)
[ -s "$ASAN_RC" ] && CPU_MS=$(( CPU_MS - $(cut -d' ' -f3 "$ASAN_RC") * 1000 ))
echo "CPU: $(( CPU_MS / 1000 ))s used by all suites (all lanes) in ${elapsed}s on $(nproc) cores"

[ ${#failures[@]} -eq 0 ] || echo "failed suites: ${failures[*]}"
echo "tests: $passed passed, $failed failed$([ "$skipped" -gt 0 ] && echo ", $skipped skipped")"
[ "$failed" -eq 0 ]
