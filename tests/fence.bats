#!/usr/bin/env bats
# tests/fence.bats - checkpoint fencing by generation with real worker
# processes (worker/ckpt/ckpt_fence.c, the writer and resume of
# worker/ckpt/ckpt_writer.c and ckpt_resume.c), on file:// (CK_BACKEND=file, the default) or on S3
# (CK_BACKEND=s3: moto's server on loopback, tests/s3/moto_server.py): a
# generation-0 run is frozen with SIGSTOP after a few checkpoints, a
# generation-1 run (VITJOB_RESTART=1) resumes from the same checkpoint.uri,
# checkpoints and finishes bit for bit like an uninterrupted run; then
# generation 0 is let go with SIGCONT: it deletes and changes no object of
# generation 1, what it had in flight when it froze may land only under
# generation 0's own names and changes neither the listing nor the step a
# resume takes, its rank 0 exits 1 with event=fenced and class=rendezvous
# without exporting, and every step still verifies and exports as before.
# And deterministically, with a writer held by a FIFO at the exact moment
# between a fence check and its act (VITJOB_TEST_FENCE_HOLD) while a newer
# generation takes over: a shard or a manifest is stored and removed again,
# a retention deletes only generation 0's objects of its one step.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

load ranks_helpers
load recipe_helpers

setup_file() {
  ck_backend_start
  recipe_data # every training image, 400 test images: the final evaluations stay short
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
  ARGS=(--set data.uri="file://$BATS_FILE_TMPDIR/fm"
        --set training.steps=30 --set training.optimizer.warmupSteps=2
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
  local listed; listed=$("$WORKER" checkpoints --uri "$(uri ck)" "${ENDPOINT[@]}")
  grep -q '^fence/g1.json ' "$TMP/before"
  grep -q '^step-000000030/manifest.g1.json ' "$TMP/before"
  # generation 0 goes on
  kill -CONT $frozen
  RANK_PIDS=("${g0[@]}")
  wait_ranks
  objects ck > "$TMP/after"
  for r in $(seq 0 $((w - 1))); do
    echo "generation 0 rank $r: exit $(cat "$TMP/g0/rank-$r.rc"): $(tail -1 "$TMP/g0/rank-$r.log" | cut -c1-300)"
    # a rank that had to be killed: what it did last
    [ "$(cat "$TMP/g0/rank-$r.rc")" -lt 124 ] || tail -25 "$TMP/g0/rank-$r.log" | cut -c1-400
    [ "$(cat "$TMP/g0/rank-$r.rc")" -ne 0 ]
  done
  # some rank is refused by the fence (exit 1, class rendezvous); the others
  # stop on the fence too, or on a peer that stopped (rank 0 waiting for a
  # fenced rank's shard gives up when the rendezvous times out: exit 1)
  [ "$(cat "$TMP/g0/rank-0.rc")" -eq 1 ]
  grep -l "event=fenced generation=0 newer_generation=1" "$TMP"/g0/rank-*.log
  grep -q "class=rendezvous" $(grep -l "event=fenced generation=0 newer_generation=1" "$TMP"/g0/rank-*.log)
  [ ! -e "$TMP/g0.st" ]   # no export of the stale weights either
  # the guarantee (docs/design.md, Checkpoints): nothing of generation 1
  # deleted or changed; what generation 0 had in flight when it froze may
  # land, under generation 0's own names only, and nobody sees it: the
  # listing and the step a resume takes are what they were
  local gone added
  gone=$(comm -23 "$TMP/before" "$TMP/after")
  added=$(comm -13 "$TMP/before" "$TMP/after")
  echo "deleted or changed: ${gone:-none}"; echo "added: ${added:-none}"
  [ -z "$gone" ]
  [ "$(grep -c . <<<"$added")" -le "$w" ]
  ! grep -q '\.g[0-9]*\.\|^fence/' <<<"$added"
  # every step verifies; the newest are generation 1's
  run "$WORKER" checkpoints --uri "$(uri ck)" "${ENDPOINT[@]}"
  echo "$output"
  [ "$status" -eq 0 ]
  [ "$output" = "$listed" ]
  [[ "$output" != *corrupt* ]]
  for s in 28 29 30; do grep -q "^$s  *complete .* generation=1" <<<"$output"; done
  grep -q "^fence: generation 1 " <<<"$output"
  "$WORKER" export --from "$(uri ck)" --out "$TMP/last.st" "${ENDPOINT[@]}"
  cmp "$TMP/ref.st" "$TMP/last.st"
}

# put_object NAME TEXT: an object of this test's checkpoints written behind
# the worker's back (what another generation would write)
put_object() {
  if s3; then
    "$PY" tests/s3/s3ctl.py put "$(uri "$1")" "$2"
  else
    mkdir -p "$(dirname "$TMP/$1")" && printf '%s' "$2" > "$TMP/$1"
  fi
}

# held ACTION STEP KEEP: one rank of generation 0 is held (VITJOB_TEST_FENCE_HOLD,
# a FIFO) right after the fence check of its ACTION at STEP passed, before
# the act; generation 1 takes over there (its fence, and with retention a
# manifest of its own in the step being deleted); then the rank is let go
held() {
  local action=$1 step=$2 keep=$3
  mkfifo "$TMP/hold"
  mkdir -p "$TMP/g0"
  local port; port=$(free_port)
  RANK_PIDS=()
  VITJOB_TEST_FENCE_HOLD="$action:$step:$TMP/hold" start_rank 1 0 "$port" 0 "$TMP/g0" \
    "${ARGS[@]}" --set training.steps=6 --set training.sharding=none \
    --set checkpoint.uri="$(uri ck)" --set checkpoint.intervalSteps=1 \
    --set checkpoint.keep="$keep" "${CKEP[@]}"
  wait_for "$TMP/g0/rank-0.log" "event=fence_hold action=$action step=$step "
  put_object ck/fence/g1.json '{"generation": 1, "restart": 1}'
  [ "$action" != retention ] || put_object "ck/$(printf 'step-%09d' "$step")/manifest.g1.json" '{}'
  objects ck > "$TMP/before"
  echo go > "$TMP/hold"
  wait_ranks
  objects ck > "$TMP/after"
  echo "generation 0: exit $(cat "$TMP/g0/rank-0.rc"): $(grep 'event=fenced' "$TMP/g0/rank-0.log" | cut -c1-400)"
  [ "$(cat "$TMP/g0/rank-0.rc")" -eq 1 ]
  grep -q "event=fence_released action=$action step=$step" "$TMP/g0/rank-0.log"
}

@test "a shard whose writer is held between its fence check and its put, while a newer generation takes over, is stored, then removed again, and never listed" {
  CKEP=(); if s3; then CKEP=(--set checkpoint.endpoint="$S3_ENDPOINT"); fi
  held shard 3 5
  grep -q "event=fenced generation=0 newer_generation=1 action=shard step=3 in_flight=1" "$TMP/g0/rank-0.log"
  grep -q "step-000000003/shard-00000-of-00001.bin was stored just as that happened and has been removed again" "$TMP/g0/rank-0.log"
  diff "$TMP/before" "$TMP/after"
  run "$WORKER" checkpoints --uri "$(uri ck)" "${ENDPOINT[@]}"
  echo "$output"
  [ "$status" -eq 0 ]
  [ "$(grep -c complete <<<"$output")" -eq 2 ]
  ! grep -q '^3 ' <<<"$output"
}

@test "a manifest whose writer is held between its fence check and its put is removed again; its step's shard stays invisible to checkpoints and resume" {
  CKEP=(); if s3; then CKEP=(--set checkpoint.endpoint="$S3_ENDPOINT"); fi
  held manifest 3 5
  grep -q "action=manifest step=3 in_flight=1" "$TMP/g0/rank-0.log"
  grep -q "step-000000003/manifest.json was stored just as that happened and has been removed again" "$TMP/g0/rank-0.log"
  diff "$TMP/before" "$TMP/after"
  grep -q '^step-000000003/shard-00000-of-00001.bin ' "$TMP/after"
  run "$WORKER" checkpoints --uri "$(uri ck)" "${ENDPOINT[@]}"
  echo "$output"
  [ "$status" -eq 0 ]
  ! grep -q '^3 ' <<<"$output"
  grep -q '^2  *complete' <<<"$output"
  # a resume takes step 2, and says nothing of the leftover
  "$WORKER" export --from "$(uri ck)" --out "$TMP/r.st" "${ENDPOINT[@]}" 2> "$TMP/export.log"
  ! grep -q 'step=3' "$TMP/export.log"
}

@test "a retention held between its fence check and its deletes, while a newer generation writes into that step, deletes only generation 0's objects of it and stops" {
  CKEP=(); if s3; then CKEP=(--set checkpoint.endpoint="$S3_ENDPOINT"); fi
  held retention 1 1
  cat "$TMP/after"
  # generation 1's object of the step is untouched; generation 0's of it are gone
  grep -q '^step-000000001/manifest.g1.json ' "$TMP/after"
  ! grep -q '^step-000000001/manifest.json \|^step-000000001/shard-00000-of-00001.bin ' "$TMP/after"
  # and it stores nothing more: its next shard is refused before the put
  grep -q "action=shard step=3 in_flight=0" "$TMP/g0/rank-0.log"
  ! grep -q '^step-000000003/' "$TMP/after"
}

@test "one rank: generation 0 frozen, generation 1 takes over; let go, generation 0 is fenced, changes and deletes nothing of generation 1, and what it had in flight is never seen" {
  frozen_generation 1
}

@test "two ranks: a frozen generation 0 gang let go after generation 1 finished deletes and changes nothing of it, and what it had in flight is never seen" {
  frozen_generation 2
}
