#!/usr/bin/env bats
# tests/ckpt.bats - checkpoints and resume end to end (worker/ckpt/ckpt_*.c,
# worker/ckpt/ckpt_store.c, the resume and save paths of worker/train/train.c, the
# `checkpoints` and `export` commands), on file:// (CK_BACKEND=file, the
# default) or on S3 (CK_BACKEND=s3: moto's server on loopback with
# signatures checked, tests/s3/moto_server.py): a resumed run follows the
# uninterrupted one bit for bit at 1 and 2 ranks in every sharding mode and
# within 1e-5 across world sizes; torn and corrupt steps are passed over; a
# kill -9 at any moment loses only the steps since the last checkpoint; a
# stop saves the last completed step; another model's checkpoint is
# refused; a resume with another training.steps warns once; on S3 a failing server is retried through and one that stays
# down is a retryable error.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=600}"

load ranks_helpers
load recipe_helpers

setup_file() {
  recipe_data
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
  recipe_args
  ck_endpoint
}

# ck NAME: sets CK to the worker's settings for checkpoints under NAME
ck() {
  CK=(--set checkpoint.uri="$(uri "$1")")
  if s3; then CK+=(--set checkpoint.endpoint="$S3_ENDPOINT"); fi
}

# rm_step NAME STEP: removes a step's objects behind the worker's back
rm_step() {
  local d; d=$(printf 'step-%09d' "$2")
  if s3; then "$PY" tests/s3/s3ctl.py rm "$(uri "$1")/$d/"; else rm -r "$TMP/$1/$d"; fi
}

# has NAME OBJECT: the object exists
has() {
  if s3; then "$PY" tests/s3/s3ctl.py exists "$(uri "$1")/$2"; else [ -f "$TMP/$1/$2" ]; fi
}

# rm_obj NAME OBJECT and flip NAME OBJECT OFFSET (writes 0x5a; a negative
# OFFSET counts from the end)
rm_obj() {
  if s3; then "$PY" tests/s3/s3ctl.py rm "$(uri "$1")/$2"; else rm "$TMP/$1/$2"; fi
}
flip() {
  if s3; then "$PY" tests/s3/s3ctl.py flip "$(uri "$1")/$2" "$3"
  else
    local off=$3
    [ "$off" -ge 0 ] || off=$(( $(stat -c %s "$TMP/$1/$2") + off ))
    printf '\x5a' | dd of="$TMP/$1/$2" bs=1 seek="$off" conv=notrunc 2>/dev/null
  fi
}

@test "resumed at step 4 of 8, 1 and 2 ranks in every sharding mode continue bit for bit" {
  for w in 1 2; do
    for mode in none grad-op full; do
      [ "$w" -eq 1 ] && [ "$mode" != none ] && continue
      ck "ck-$w-$mode"
      CK+=(--set checkpoint.intervalSteps=4 --set training.sharding=$mode)
      run_world "$w" "$TMP/a-$w-$mode" "${ARGS[@]}" "${CK[@]}" --set training.exportPath="$TMP/a-$w-$mode.st"
      has "ck-$w-$mode" step-000000004/manifest.json
      has "ck-$w-$mode" step-000000008/manifest.json
      if s3; then "$PY" tests/s3/s3ctl.py verify "$(uri "ck-$w-$mode")"; fi   # boto3 reads what we wrote
      rm_step "ck-$w-$mode" 8   # as if it died after step 4's checkpoint
      run_world "$w" "$TMP/b-$w-$mode" "${ARGS[@]}" "${CK[@]}" --set training.exportPath="$TMP/b-$w-$mode.st"
      grep -q "event=resumed step=4 from_world_size=$w from_sharding=$mode" "$TMP/b-$w-$mode/rank-0.log"
      echo "world $w, sharding $mode: steps 5-8 and the weights identical"
      same_from "$TMP/a-$w-$mode/metrics.jsonl" "$TMP/b-$w-$mode/metrics.jsonl" 4
      cmp "$TMP/a-$w-$mode.st" "$TMP/b-$w-$mode.st"
      # the summary's rate is this run's images over this run's time: the
      # resumed run trained 4 of the 8 steps, so half the first run's images
      python3 -c 'import json, sys
a, b = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
ia, ib = (s["images_per_sec"] * s["train_seconds"] for s in (a, b))
print(f"images: first run {ia:.1f}, resumed run {ib:.1f}")
sys.exit(abs(ib / ia - 0.5) > 0.02)' "$TMP/a-$w-$mode/rank-0.out" "$TMP/b-$w-$mode/rank-0.out"
    done
  done
}

@test "resume on another world size: 2 ranks to 1 and 1 to 4 follow the one-process run" {
  run_world 1 "$TMP/one" "${ARGS[@]}"
  # 2 ranks (grad-op) save at 4; 1 rank resumes
  ck c21
  run_world 2 "$TMP/two" "${ARGS[@]}" "${CK[@]}" --set checkpoint.intervalSteps=4 --set training.sharding=grad-op
  rm_step c21 8
  run_world 1 "$TMP/to1" "${ARGS[@]}" "${CK[@]}"
  grep -q "event=resumed step=4 from_world_size=2 from_sharding=grad-op world_size=1" "$TMP/to1/rank-0.log"
  compare <(grep '"loss"' "$TMP/one/metrics.jsonl" | tail -4) "$TMP/to1/metrics.jsonl" 1e-5
  # 1 rank saves at 4; 4 ranks (full) resume
  ck c14
  run_world 1 "$TMP/solo" "${ARGS[@]}" "${CK[@]}" --set checkpoint.intervalSteps=4
  rm_step c14 8
  run_world 4 "$TMP/to4" "${ARGS[@]}" "${CK[@]}" --set training.sharding=full
  grep -q "event=resumed step=4 from_world_size=1 from_sharding=none world_size=4" "$TMP/to4/rank-0.log"
  compare <(grep '"loss"' "$TMP/one/metrics.jsonl" | tail -4) "$TMP/to4/metrics.jsonl" 1e-5
}

@test "a torn step and a shard with one flipped byte are passed over for the previous one" {
  ck ck
  CK+=(--set checkpoint.intervalSteps=2 --set checkpoint.keep=10)
  run_world 1 "$TMP/a" "${ARGS[@]}" "${CK[@]}"
  rm_obj ck step-000000008/manifest.json                          # torn
  flip ck step-000000006/shard-00000-of-00001.bin 4096
  run "$WORKER" checkpoints --uri "$(uri ck)" "${ENDPOINT[@]}"
  echo "$output"
  [[ "$output" == *"8            torn      no manifest"* ]]
  [[ "$output" == *"6            corrupt   "*"block 0"*"CRC"* ]]
  [[ "$output" == *"4            complete  world_size=1"* ]]
  # a run of seconds: a resume that loops (trying a step it passed over
  # again) fails the test in two minutes, not the default ten
  RANK_TIMEOUT=120 run_world 1 "$TMP/b" "${ARGS[@]}" "${CK[@]}"
  grep -q 'event=skipped step=8 reason="torn' "$TMP/b/rank-0.log"
  grep -q 'event=skipped step=6 reason="corrupt' "$TMP/b/rank-0.log"
  grep -q "event=resumed step=4" "$TMP/b/rank-0.log"
  same_from "$TMP/a/metrics.jsonl" "$TMP/b/metrics.jsonl" 4
}

# steps_in NAME: the steps that have objects under NAME ("4 5"), then "|"
# and those with a manifest
steps_in() {
  local objs
  if s3; then objs=$("$PY" tests/s3/s3ctl.py ls "$(uri "$1")/" | cut -d' ' -f1)
  else objs=$(cd "$TMP/$1" && find . -type f | sed 's|^\./||'); fi
  local any complete
  any=$(grep -o '^step-[0-9]*' <<<"$objs" | sed 's/step-0*//' | sort -n | uniq | xargs)
  complete=$(grep '/manifest.json$' <<<"$objs" | grep -o '^step-[0-9]*' | sed 's/step-0*//' | sort -n | xargs)
  echo "$any|$complete"
}

@test "checkpoint.keep=2 leaves exactly the two newest complete steps, before and after a resume past a torn step" {
  ck keep
  CK+=(--set checkpoint.intervalSteps=1 --set checkpoint.keep=2)
  run_world 1 "$TMP/a" "${ARGS[@]}" "${CK[@]}" --set training.steps=5
  echo "after 5 checkpoints: $(steps_in keep)"
  [ "$(steps_in keep)" = "4 5|4 5" ]
  rm_obj keep step-000000005/manifest.json   # 5 torn: its save died before the manifest
  [ "$(steps_in keep)" = "4 5|4" ]
  run_world 1 "$TMP/b" "${ARGS[@]}" "${CK[@]}" --set training.steps=8
  grep -q 'event=skipped step=5 reason="torn' "$TMP/b/rank-0.log"
  grep -q "event=resumed step=4" "$TMP/b/rank-0.log"
  echo "after the resumed run to 8: $(steps_in keep)"
  [ "$(steps_in keep)" = "7 8|7 8" ]
}

@test "2 ranks: a corrupt block that only rank 1 reads makes both pass the step over together" {
  run_world 1 "$TMP/one" "${ARGS[@]}"
  ck ck
  CK+=(--set checkpoint.intervalSteps=2 --set checkpoint.keep=10)
  run_world 1 "$TMP/a" "${ARGS[@]}" "${CK[@]}"
  rm_step ck 8
  # the last bytes of the shard: AdamW v of the vector's end, which only
  # rank 1 of 2 reads under grad-op (every rank reads all parameters)
  flip ck step-000000006/shard-00000-of-00001.bin -100
  run_world 2 "$TMP/b" "${ARGS[@]}" "${CK[@]}" --set training.sharding=grad-op
  cat "$TMP/b/rank-0.log" | grep ckpt
  grep -q 'event=skipped step=6 reason="corrupt: rank 1: checkpoint step-000000006/shard-00000-of-00001.bin: block' "$TMP/b/rank-0.log"
  grep -q "event=resumed step=4 from_world_size=1" "$TMP/b/rank-0.log"
  grep -q "event=resumed step=4 from_world_size=1" "$TMP/b/rank-1.log"
  compare <(grep '"loss"' "$TMP/one/metrics.jsonl" | tail -4) "$TMP/b/metrics.jsonl" 1e-5
}

@test "kill -9 at any moment: the next run resumes from the last complete step and continues bit for bit" {
  run_world 1 "$TMP/ref" "${ARGS[@]}" --set training.steps=40
  ck ck
  CK+=(--set checkpoint.intervalSteps=1 --set training.steps=40)
  mkdir -p "$TMP/k"
  start_rank 1 0 "$(free_port)" 0 "$TMP/k" "${ARGS[@]}" "${CK[@]}"
  rank0_logged "$TMP/k" "event=saved step=12" "checkpoint of step 12"
  sleep 0.0$((RANDOM % 10))
  pkill -KILL -f "checkpoint.uri=$(uri ck)" || true
  wait_ranks
  last=$(grep -o 'event=saved step=[0-9]*' "$TMP/k/rank-0.log" | tail -1 | grep -o '[0-9]*$')
  echo "killed after the checkpoint of step $last; the newest steps then:"
  "$WORKER" checkpoints --uri "$(uri ck)" "${ENDPOINT[@]}" | tail -3
  run_world 1 "$TMP/r" "${ARGS[@]}" "${CK[@]}"
  from=$(grep -o 'event=resumed step=[0-9]*' "$TMP/r/rank-0.log" | grep -o '[0-9]*$')
  echo "resumed from step $from"
  [ "$from" -ge "$last" ]
  same_from "$TMP/ref/metrics.jsonl" "$TMP/r/metrics.jsonl" "$from"
}

@test "SIGTERM saves the last completed step, and the next run continues from it bit for bit" {
  # the stopped run is of a million steps, so that it cannot end before the
  # TERM however slow the machine; with a constant learning rate its steps
  # are those of a run of any length, so the reference and the resumed run
  # are of 8 steps past the stop
  ck ck
  CK+=(--set checkpoint.intervalSteps=1000 --set training.sharding=full
       --set training.logInterval=1 --set training.optimizer.schedule=constant)
  mkdir -p "$TMP/t"
  port=$(free_port)
  for r in 0 1; do
    start_rank 2 $r "$port" 0 "$TMP/t" "${ARGS[@]}" "${CK[@]}" --set training.steps=1000000
  done
  rank0_logged "$TMP/t" "step=5/" "step 5"
  pkill -TERM -f "checkpoint.uri=$(uri ck)" || true
  wait_ranks
  for r in 0 1; do [ "$(cat "$TMP/t/rank-$r.rc")" -eq 143 ]; done
  tail -1 "$TMP/t/rank-0.log"
  grep -q "every rank ended after step [0-9]*, checkpointed" "$TMP/t/rank-0.log"
  stop=$(grep -o "every rank ended after step [0-9]*" "$TMP/t/rank-0.log" | grep -o '[0-9]*$')
  end=(--set training.steps=$((stop + 8)))
  run_world 2 "$TMP/ref" "${ARGS[@]}" --set training.sharding=full \
    --set training.optimizer.schedule=constant "${end[@]}"
  run_world 2 "$TMP/r" "${ARGS[@]}" "${CK[@]}" "${end[@]}"
  from=$(grep -o 'event=resumed step=[0-9]*' "$TMP/r/rank-0.log" | grep -o '[0-9]*$')
  echo "stopped after step $stop and resumed at step $from"
  [ "$from" -ge 5 ] && [ "$from" -eq "$stop" ]
  same_from "$TMP/ref/metrics.jsonl" "$TMP/r/metrics.jsonl" "$from"
}

@test "a checkpoint of another model is refused with exit 2, naming both" {
  ck ck
  run_world 1 "$TMP/a" "${ARGS[@]}" "${CK[@]}" --set training.steps=2
  run "$WORKER" train "${ARGS[@]}" "${CK[@]}" --set model.depth=2
  [ "$status" -eq 2 ]
  [[ "$output" == *"class=config"*"was written for the model"*'\"depth\":4'*"not this run's"*'\"depth\":2'* ]]
}

@test "a resume with another training.steps warns once with both totals and the new schedule; the same total, or a manifest without totalSteps, warns not" {
  ck ck
  run_world 1 "$TMP/a" "${ARGS[@]}" "${CK[@]}" --set training.steps=4
  has ck step-000000004/manifest.json
  run "$WORKER" train "${ARGS[@]}" "${CK[@]}" --set training.steps=8
  echo "$output"
  [ "$status" -eq 0 ]
  [ "$(grep -c 'level=warn .*event=total_steps_changed' <<< "$output")" -eq 1 ]
  [[ "$output" == *'event=total_steps_changed checkpoint_step=4 checkpoint_total_steps=4 total_steps=8 msg="checkpoint step 4 was written by a run of 4 steps and this run has 8 (training.steps=8): the learning-rate schedule is now computed for 8 steps, so step 5 trains at lr=0.00225 instead of 0 and the cosine decay reaches training.optimizer.minLr at step 8 instead of 4"'* ]]
  # resumed at its own total: nothing to say
  run "$WORKER" train "${ARGS[@]}" "${CK[@]}" --set training.steps=8
  [ "$status" -eq 0 ]
  [[ "$output" != *"event=total_steps_changed"* ]]
  # a manifest written before "totalSteps": no warning (file:// only: edited in place)
  if ! s3; then
    sed -i '/"totalSteps"/d' "$TMP/ck/step-000000008/manifest.json"
    run "$WORKER" train "${ARGS[@]}" "${CK[@]}" --set training.steps=10
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"step=10/10"* ]]
    [[ "$output" != *"event=total_steps_changed"* ]]
  fi
}

@test "export writes the newest complete step, or the one named, as the run's own export" {
  ck ck
  run_world 1 "$TMP/a" "${ARGS[@]}" "${CK[@]}" --set checkpoint.intervalSteps=4 \
    --set training.exportPath="$TMP/run.st"
  "$WORKER" export --from "$(uri ck)" --out "$TMP/last.st" "${ENDPOINT[@]}"
  cmp "$TMP/run.st" "$TMP/last.st"
  "$WORKER" export --from "$(uri ck)/step-000000004" --out "$TMP/four.st" "${ENDPOINT[@]}"
  ! cmp -s "$TMP/run.st" "$TMP/four.st"
  run "$WORKER" export --from "$(uri ck)/step-000000005" --out "$TMP/five.st" "${ENDPOINT[@]}"
  [ "$status" -ne 0 ]
  [[ "$output" == *"step-000000005/manifest.json"* ]]
  [ ! -e "$TMP/five.st" ]
  s3 && return 0
  # a plain path, absolute or relative, as model.init takes one
  "$WORKER" export --from "$TMP/ck/step-000000004" --out "$TMP/four-path.st"
  cmp "$TMP/four.st" "$TMP/four-path.st"
  local w; w=$(realpath "$WORKER")
  (cd "$TMP" && "$w" export --from ck --out last-path.st && "$w" checkpoints --uri ck) |
    grep -q '^8  *complete'
  cmp "$TMP/run.st" "$TMP/last-path.st"
  run "$WORKER" export --from "$TMP/nothing-here" --out "$TMP/none.st"
  [ "$status" -eq 3 ]
  [[ "$output" == *"file://$TMP/nothing-here: no complete checkpoint"* ]]
  run "$WORKER" export --from "http://x/ck" --out "$TMP/none.st"
  [ "$status" -eq 2 ]
  [[ "$output" == *"--from http://x/ck: expected a path, file:///path or s3://bucket/prefix"* ]]
  [[ "$output" != *checkpoint.uri* ]]
  run "$WORKER" export --help
  [ "$status" -eq 0 ]
  [[ "$output" == *"train [--config FILE]"* ]]
}

@test "a full disk under file:// is a clear retryable error and the previous checkpoint stays intact" {
  s3 && skip "file:// only"
  mkdir -p "$TMP/small"
  mount -t tmpfs -o size=4m tmpfs "$TMP/small" 2>/dev/null || skip "cannot mount a small tmpfs here"
  run_world 1 "$TMP/a" "${ARGS[@]}" --set checkpoint.uri="file://$TMP/small/ck" \
    --set checkpoint.intervalSteps=1 --set checkpoint.keep=10 || true
  tail -1 "$TMP/a/rank-0.log"
  [ "$(cat "$TMP/a/rank-0.rc")" -eq 1 ]
  grep -q 'class=io retried=yes.*No space left on device; the previous checkpoints are untouched' "$TMP/a/rank-0.log"
  run "$WORKER" checkpoints --uri "file://$TMP/small/ck"
  echo "$output"
  [[ "$output" == *"complete"* ]]
  [[ "$output" != *"corrupt"* ]]
}

@test "S3: a server that answers 500 and resets connections for a while: the uploads complete after retries, bit for bit" {
  s3 || skip "S3 only"
  "$PY" tests/s3/fault_proxy.py --listen-port 0 --target "${S3_ENDPOINT#http://}" --ready-file "$TMP/proxy.port" \
    --fail-500 2 --reset 2 --only-method PUT --stats-file "$TMP/proxy.stats" 3>&- &
  for _ in $(seq 1 100); do [ -s "$TMP/proxy.port" ] && break; sleep 0.1; done
  ck=(--set checkpoint.uri="$(uri ck)" --set checkpoint.endpoint="http://127.0.0.1:$(cat "$TMP/proxy.port")"
      --set checkpoint.intervalSteps=4 --set training.sharding=full)
  run_world 2 "$TMP/a" "${ARGS[@]}" "${ck[@]}" --set training.exportPath="$TMP/a.st"
  cat "$TMP/proxy.stats"
  grep -q "fail500=2 resets=2" "$TMP/proxy.stats"
  grep -q "level=warn comp=s3 op=PUT.*status=500" "$TMP/a/rank-0.log" "$TMP/a/rank-1.log"
  run "$WORKER" checkpoints --uri "$(uri ck)" "${ENDPOINT[@]}"
  echo "$output"
  [[ "$output" == *"4            complete"* ]]
  [[ "$output" == *"8            complete"* ]]
  # and what was stored is what was trained: resume at 4 ends where the run ended
  rm_step ck 8
  ck "ck"
  run_world 2 "$TMP/b" "${ARGS[@]}" "${CK[@]}" --set training.sharding=full --set training.exportPath="$TMP/b.st"
  grep -q "event=resumed step=4" "$TMP/b/rank-0.log"
  cmp "$TMP/a.st" "$TMP/b.st"
}

@test "S3: a server that stays down is a clear retryable error (exit 1, class io) naming the endpoint" {
  s3 || skip "S3 only"
  port=$(free_port)   # nothing listens there
  run env AWS_MAX_ATTEMPTS=3 "$WORKER" train "${ARGS[@]}" --set checkpoint.uri="s3://vitjob-ck/down/ck" \
    --set checkpoint.endpoint="http://127.0.0.1:$port"
  echo "$output" | tail -2
  [ "$status" -eq 1 ]
  [[ "$output" == *"class=io retried=yes"*"127.0.0.1:$port"* ]]
}

@test "S3: a wrong secret is refused at once with exit 2, naming the signature mismatch and not the secret" {
  s3 || skip "S3 only"
  ck ck
  run env AWS_SECRET_ACCESS_KEY=not-the-secret-xyz "$WORKER" train "${ARGS[@]}" "${CK[@]}"
  echo "$output" | tail -2
  [ "$status" -eq 2 ]
  [[ "$output" == *"retried=no"*"ignature"* ]]
  [[ "$output" != *"not-the-secret-xyz"* ]]
}
