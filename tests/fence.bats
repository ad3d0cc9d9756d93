#!/usr/bin/env bats
# tests/fence.bats - checkpoint fencing by generation with real worker
# processes (worker/ckpt/ckpt_fence.c, the writer and resume of
# worker/ckpt/ckpt.c), on file:// (CK_BACKEND=file, the default) or on S3
# (CK_BACKEND=s3: moto's server on loopback, tests/s3/moto_server.py): a
# generation-0 run is frozen with SIGSTOP after a few checkpoints, a
# generation-1 run (VITJOB_RESTART=1) resumes from the same checkpoint.uri,
# checkpoints and finishes bit for bit like an uninterrupted run; then
# generation 0 is let go with SIGCONT: it deletes nothing, changes no object
# of generation 1 and adds none (on S3 the one request each rank was frozen
# in may complete, under generation 0's own name), its rank 0 exits 1 with
# event=fenced and class=rendezvous without exporting, and every step still
# verifies and exports as before.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

load ranks_helpers

setup_file() {
  ck_backend_start
}

teardown_file() {
  ck_backend_stop
}

setup() {
  [ -z "${S3_SKIP:-}" ] || skip "$S3_SKIP"
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  TMP=$(mktemp -d)
  RANK_TIMEOUT=240
  ARGS=(--set training.steps=30 --set training.optimizer.warmupSteps=2
        --set training.globalBatchSize=48 --set training.microBatchSize=4
        --set training.threads=1 --set training.exportPath=
        --set training.rendezvousTimeoutSeconds=60 --set training.collectiveTimeoutSeconds=60
        --set training.heartbeatTimeoutSeconds=600)
  # the heartbeat would also stop a frozen rank on waking (tests/lostpeer.bats);
  # with its timeout far away, what stops generation 0 here is the fence
  ck_endpoint
}

# objects NAME: "name size sha256" of every object under NAME, sorted
objects() {
  if s3; then
    "$PY" tests/s3/s3ctl.py readall "$(uri "$1")/" | sort
  else
    (cd "$TMP/$1" && find . -type f ! -name '.*' -printf '%P\n' | sort | while read -r f; do
       echo "$f $(stat -c %s "$f") $(sha256sum < "$f" | cut -d' ' -f1)"; done)
  fi
}

# wait_for FILE PATTERN: bounded wait (60 s) for a line in a log
wait_for() {
  for _ in $(seq 1 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "no '$2' in $1 after 60 s"; tail -5 "$1"; return 1
}

# frozen_generation W: the story above with W ranks per generation
frozen_generation() {
  local w=$1 r
  local mode=(--set training.sharding=none)
  [ "$w" -gt 1 ] && mode=(--set training.sharding=grad-op)
  local ck=("${mode[@]}" --set checkpoint.uri="$(uri ck)" --set checkpoint.intervalSteps=1
            --set checkpoint.keep=3)
  if s3; then ck+=(--set checkpoint.endpoint="$S3_ENDPOINT"); fi
  # the uninterrupted run, without checkpoints
  run_world "$w" "$TMP/ref" "${ARGS[@]}" "${mode[@]}" --set training.exportPath="$TMP/ref.st"
  # generation 0, frozen after its third checkpoint
  mkdir -p "$TMP/g0" "$TMP/g1"
  local port; port=$(free_port)
  RANK_PIDS=()
  for r in $(seq 0 $((w - 1))); do
    start_rank "$w" "$r" "$port" 0 "$TMP/g0" "${ARGS[@]}" "${ck[@]}" --set training.exportPath="$TMP/g0.st"
  done
  local g0=("${RANK_PIDS[@]}")
  wait_for "$TMP/g0/rank-0.log" "event=saved step=3 "
  local frozen; frozen=$(test_pids VITJOB_RESTART=0)
  [ "$(wc -w <<<"$frozen")" -eq "$w" ]
  kill -STOP $frozen
  echo "generation 0 frozen after: $(grep -o 'event=saved step=[0-9]*' "$TMP/g0/rank-0.log" | tail -1)"
  # generation 1 takes over from the same URI and finishes
  port=$(free_port)
  RANK_PIDS=()
  for r in $(seq 0 $((w - 1))); do
    start_rank "$w" "$r" "$port" 1 "$TMP/g1" "${ARGS[@]}" "${ck[@]}" --set training.exportPath="$TMP/g1.st"
  done
  wait_ranks
  for r in $(seq 0 $((w - 1))); do [ "$(cat "$TMP/g1/rank-$r.rc")" -eq 0 ] || { tail -5 "$TMP/g1/rank-$r.log"; false; }; done
  grep -q "event=fence_entered generation=1 name=fence/g1.json" "$TMP/g1/rank-0.log"
  grep -o "event=resumed step=[0-9]* .*" "$TMP/g1/rank-0.log"
  grep -q "event=resumed step=[0-9]* .*from_generation=0 generation=1" "$TMP/g1/rank-0.log"
  cmp "$TMP/ref.st" "$TMP/g1.st"   # the takeover resumed bit for bit
  objects ck > "$TMP/before"
  grep -q '^fence/g1.json ' "$TMP/before"
  grep -q '^step-000000030/manifest.g1.json ' "$TMP/before"
  # generation 0 goes on
  kill -CONT $frozen
  RANK_PIDS=("${g0[@]}")
  wait_ranks
  objects ck > "$TMP/after"
  for r in $(seq 0 $((w - 1))); do
    echo "generation 0 rank $r: exit $(cat "$TMP/g0/rank-$r.rc"): $(tail -1 "$TMP/g0/rank-$r.log" | cut -c1-300)"
    [ "$(cat "$TMP/g0/rank-$r.rc")" -ne 0 ]
  done
  # rank 0 (the manifests' writer) is refused by the fence; other ranks may
  # have stopped on the fence or on rank 0 first
  [ "$(cat "$TMP/g0/rank-0.rc")" -eq 1 ]
  grep -q "event=fenced generation=0 newer_generation=1" "$TMP/g0/rank-0.log"
  grep -q "class=rendezvous" "$TMP/g0/rank-0.log"
  [ ! -e "$TMP/g0.st" ]   # no export of the stale weights either
  # nothing deleted or changed; nothing added on file:// (the fence is asked
  # right before the rename); on S3 at most the request each rank was frozen
  # in completed, under generation 0's name
  local gone added
  gone=$(comm -23 "$TMP/before" "$TMP/after")
  added=$(comm -13 "$TMP/before" "$TMP/after")
  echo "deleted or changed: ${gone:-none}"; echo "added: ${added:-none}"
  [ -z "$gone" ]
  if s3; then
    [ "$(grep -c . <<<"$added")" -le "$w" ]
    ! grep -q '\.g[0-9]*\.\|^fence/' <<<"$added"
  else
    [ -z "$added" ]
  fi
  # every step verifies; the newest are generation 1's
  run "$WORKER" checkpoints --uri "$(uri ck)" "${ENDPOINT[@]}"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" != *corrupt* ]]
  for s in 28 29 30; do grep -q "^$s  *complete .* generation=1" <<<"$output"; done
  grep -q "^fence: generation 1 " <<<"$output"
  "$WORKER" export --from "$(uri ck)" --out "$TMP/last.st" "${ENDPOINT[@]}"
  cmp "$TMP/ref.st" "$TMP/last.st"
}

@test "one rank: generation 0 frozen, generation 1 takes over; let go, generation 0 is fenced and writes, changes and deletes nothing of generation 1" {
  frozen_generation 1
}

@test "two ranks: a frozen generation 0 gang let go after generation 1 finished deletes nothing and changes nothing of it" {
  frozen_generation 2
}
