#!/usr/bin/env bats
# tests/stdfds.bats - the programs started with stdin, stdout or stderr
# closed (`>&-`, `2>&-`, `<&-`): descriptors 0, 1 and 2 are /dev/null from
# the start (lib/stdfds.c), so the first file a program opens never takes
# one of them and receives the summary or the log lines meant for the
# closed stream; the exit code is what it would have been.
#
# BUILD (default build) points at the build tree; WORKER and OPERATOR may
# override the binaries (the ASan run uses build/asan).

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

load recipe_helpers

# every training image and 100 test images: each run's final evaluation short
setup_file() { fmnist_short "$BATS_FILE_TMPDIR/fm" 100; }

setup() {
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  OPERATOR=${OPERATOR:-$BUILD/bin/vitjob-operator}
  TMP=$(mktemp -d)
  FAST=(--set training.steps=3 --set training.optimizer.warmupSteps=1
        --set training.exportPath= --set training.threads=1
        --set data.uri="file://$BATS_FILE_TMPDIR/fm")
}

teardown() {
  [ -z "${pid:-}" ] || kill -KILL "$pid" 2>/dev/null || true
  rm -rf "$TMP"
}

# std_fds PID: what descriptors 0, 1 and 2 of a running PID are, one a line,
# once it has started (its log or its sockets opened: more than six open)
std_fds() {
  for _ in $(seq 1 200); do
    [ "$(ls "/proc/$1/fd" 2>/dev/null | wc -l)" -gt 6 ] && break
    sleep 0.05
  done
  for fd in 0 1 2; do readlink "/proc/$1/fd/$fd" || echo closed; done
}
DEVNULL3=$'/dev/null\n/dev/null\n/dev/null'


# metrics_only FILE: every line of FILE is a metrics record (a JSON object
# with a step and only metrics keys), three of them a step's loss; no
# summary, no log line.
metrics_only() {
  python3 - "$1" <<'PY'
import json, sys
keys = {"step", "loss", "lr", "grad_norm", "test_accuracy", "train_seconds"}
lines = open(sys.argv[1], "rb").read().split(b"\n")
assert lines[-1] == b"", "no newline at the end"
recs = []
for l in lines[:-1]:
    try:
        r = json.loads(l)
    except ValueError:
        sys.exit("not a metrics line: %r" % l)
    assert isinstance(r, dict) and "step" in r and set(r) <= keys, "not a metrics line: %r" % l
    recs.append(r)
assert sum("loss" in r for r in recs) == 3, recs
PY
}

@test "worker train with stdout closed: the summary goes nowhere, the metrics file holds only metrics" {
  rc=0
  timeout 120 "$WORKER" train "${FAST[@]}" --metrics "$TMP/m.jsonl" 2> "$TMP/log" >&- || rc=$?
  [ "$rc" -eq 0 ] || { cat "$TMP/log"; false; }
  metrics_only "$TMP/m.jsonl"
  grep -q 'event=done' "$TMP/log"
}

@test "worker train with stderr closed: the log goes nowhere, the metrics file holds only metrics" {
  rc=0
  timeout 120 "$WORKER" train "${FAST[@]}" --metrics "$TMP/m.jsonl" > "$TMP/out" 2>&- || rc=$?
  [ "$rc" -eq 0 ]
  metrics_only "$TMP/m.jsonl"
  grep -q '"event":"summary"' "$TMP/out"
}

@test "worker train with stdin closed: exit 0, the metrics file holds only metrics" {
  rc=0
  timeout 120 "$WORKER" train "${FAST[@]}" --metrics "$TMP/m.jsonl" > "$TMP/out" 2> "$TMP/log" <&- ||
    rc=$?
  [ "$rc" -eq 0 ] || { cat "$TMP/log"; false; }
  metrics_only "$TMP/m.jsonl"
  grep -q '"event":"summary"' "$TMP/out"
  grep -q 'event=done' "$TMP/log"
}

@test "worker started with 0, 1 and 2 closed holds /dev/null on them and exits as it would" {
  rc=0; timeout 30 "$WORKER" --version <&- >&- 2>&- || rc=$?
  [ "$rc" -eq 0 ]
  rc=0; timeout 30 "$WORKER" train --no-such-flag <&- >&- 2>&- || rc=$?
  [ "$rc" -eq 2 ]
  "$WORKER" train --set training.steps=100000 --set training.threads=1 --set training.exportPath= \
    --metrics "$TMP/m.jsonl" <&- >&- 2>&- &
  pid=$!
  fds=$(std_fds "$pid")
  kill -TERM "$pid"
  rc=0; wait "$pid" || rc=$?
  echo "$fds"
  [ "$fds" = "$DEVNULL3" ]
  [ "$rc" -eq 143 ]
}

@test "operator started with 0, 1 and 2 closed holds /dev/null on them and exits as it would" {
  rc=0; timeout 30 "$OPERATOR" --help >&- || rc=$?
  [ "$rc" -eq 0 ]
  rc=0; timeout 30 "$OPERATOR" --no-such-flag 2>&- || rc=$?
  [ "$rc" -eq 2 ]
  # a running operator (its API server refuses connections, so it retries):
  # without the guard its sockets take the closed descriptors
  cat > "$TMP/kubeconfig" <<'EOF'
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: default}}]
current-context: c
EOF
  "$OPERATOR" --kubeconfig "$TMP/kubeconfig" --metrics-addr 127.0.0.1:0 <&- >&- 2>&- &
  pid=$!
  fds=$(std_fds "$pid")
  kill -TERM "$pid"
  rc=0; wait "$pid" || rc=$?
  echo "$fds"
  [ "$fds" = "$DEVNULL3" ]
  [ "$rc" -eq 0 ]
}

@test "where /dev/null cannot be opened, a program started with a closed descriptor exits 1 saying so" {
  unshare -m true 2>/dev/null || skip "no private mount namespace here (needs root)"
  # a socket bound over /dev/null: open() on it fails (ENXIO), even for root
  python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$TMP/sock"
  run timeout 30 unshare -m sh -c 'mount --bind "$1" /dev/null && exec "$2" --version >&-' \
    sh "$TMP/sock" "$WORKER"
  [ "$status" -eq 1 ]
  [[ "$output" == *"vitjob-worker: cannot open /dev/null onto a closed standard descriptor: "* ]]
  # with its descriptors open, the guard opens nothing and the program runs
  run timeout 30 unshare -m sh -c 'mount --bind "$1" /dev/null && exec "$2" --version' \
    sh "$TMP/sock" "$WORKER"
  [ "$status" -eq 0 ]
}
