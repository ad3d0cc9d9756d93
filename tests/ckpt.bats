#!/usr/bin/env bats
# tests/ckpt.bats - checkpoints and resume end to end (worker/ckpt.c,
# worker/ckpt_store.c, the resume and save paths of worker/train.c, the
# `checkpoints` and `export` commands), on file://: a resumed run follows
# the uninterrupted one bit for bit at 1 and 2 ranks in every sharding
# mode and within 1e-5 across world sizes; torn and corrupt steps are
# passed over; a kill -9 at any moment loses only the steps since the last
# checkpoint; a stop saves the last completed step; another model's
# checkpoint is refused.

load ranks_helpers

setup() {
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  TMP=$(mktemp -d)
  ARGS=(--set training.steps=8 --set training.optimizer.warmupSteps=2
        --set training.globalBatchSize=48 --set training.microBatchSize=4
        --set training.threads=1 --set training.exportPath=
        --set training.rendezvousTimeoutSeconds=60 --set training.collectiveTimeoutSeconds=60)
}


# losses A.jsonl B.jsonl FROM: the loss lines of steps > FROM are identical
same_from() {
  cmp <(grep '"loss"' "$1" | python3 -c "import json,sys; [print(l, end='') for l in sys.stdin if json.loads(l)['step'] > $3]") \
      <(grep '"loss"' "$2")
}

@test "resumed at step 4 of 8, 1 and 2 ranks in every sharding mode continue bit for bit" {
  for w in 1 2; do
    for mode in none grad-op full; do
      [ "$w" -eq 1 ] && [ "$mode" != none ] && continue
      ck=(--set checkpoint.uri="file://$TMP/ck-$w-$mode" --set checkpoint.intervalSteps=4
          --set training.sharding=$mode)
      run_world "$w" "$TMP/a-$w-$mode" "${ARGS[@]}" "${ck[@]}" --set training.exportPath="$TMP/a-$w-$mode.st"
      [ -f "$TMP/ck-$w-$mode/step-000000004/manifest.json" ]
      [ -f "$TMP/ck-$w-$mode/step-000000008/manifest.json" ]
      rm -r "$TMP/ck-$w-$mode/step-000000008"   # as if it died after step 4's checkpoint
      run_world "$w" "$TMP/b-$w-$mode" "${ARGS[@]}" "${ck[@]}" --set training.exportPath="$TMP/b-$w-$mode.st"
      grep -q "event=resumed step=4 from_world_size=$w from_sharding=$mode" "$TMP/b-$w-$mode/rank-0.log"
      echo "world $w, sharding $mode: steps 5-8 and the weights identical"
      same_from "$TMP/a-$w-$mode/metrics.jsonl" "$TMP/b-$w-$mode/metrics.jsonl" 4
      cmp "$TMP/a-$w-$mode.st" "$TMP/b-$w-$mode.st"
    done
  done
}

@test "resume on another world size: 2 ranks to 1 and 1 to 4 follow the one-process run" {
  run_world 1 "$TMP/one" "${ARGS[@]}"
  # 2 ranks (grad-op) save at 4; 1 rank resumes
  run_world 2 "$TMP/two" "${ARGS[@]}" --set checkpoint.uri="file://$TMP/c21" \
    --set checkpoint.intervalSteps=4 --set training.sharding=grad-op
  rm -r "$TMP/c21/step-000000008"
  run_world 1 "$TMP/to1" "${ARGS[@]}" --set checkpoint.uri="file://$TMP/c21"
  grep -q "event=resumed step=4 from_world_size=2 from_sharding=grad-op world_size=1" "$TMP/to1/rank-0.log"
  compare <(grep '"loss"' "$TMP/one/metrics.jsonl" | tail -4) "$TMP/to1/metrics.jsonl" 1e-5
  # 1 rank saves at 4; 4 ranks (full) resume
  run_world 1 "$TMP/solo" "${ARGS[@]}" --set checkpoint.uri="file://$TMP/c14" --set checkpoint.intervalSteps=4
  rm -r "$TMP/c14/step-000000008"
  run_world 4 "$TMP/to4" "${ARGS[@]}" --set checkpoint.uri="file://$TMP/c14" --set training.sharding=full
  grep -q "event=resumed step=4 from_world_size=1 from_sharding=none world_size=4" "$TMP/to4/rank-0.log"
  compare <(grep '"loss"' "$TMP/one/metrics.jsonl" | tail -4) "$TMP/to4/metrics.jsonl" 1e-5
}

@test "a torn step and a shard with one flipped byte are passed over for the previous one" {
  ck=(--set checkpoint.uri="file://$TMP/ck" --set checkpoint.intervalSteps=2 --set checkpoint.keep=10)
  run_world 1 "$TMP/a" "${ARGS[@]}" "${ck[@]}"
  rm "$TMP/ck/step-000000008/manifest.json"                       # torn
  printf '\x5a' | dd of="$TMP/ck/step-000000006/shard-00000-of-00001.bin" bs=1 seek=4096 conv=notrunc 2>/dev/null
  run "$WORKER" checkpoints --uri "file://$TMP/ck"
  echo "$output"
  [[ "$output" == *"8            torn      no manifest"* ]]
  [[ "$output" == *"6            corrupt   "*"block 0"*"CRC"* ]]
  [[ "$output" == *"4            complete  world_size=1"* ]]
  run_world 1 "$TMP/b" "${ARGS[@]}" "${ck[@]}"
  grep -q 'event=skipped step=8 reason="torn' "$TMP/b/rank-0.log"
  grep -q 'event=skipped step=6 reason="corrupt' "$TMP/b/rank-0.log"
  grep -q "event=resumed step=4" "$TMP/b/rank-0.log"
  same_from "$TMP/a/metrics.jsonl" "$TMP/b/metrics.jsonl" 4
}

@test "kill -9 at any moment: the next run resumes from the last complete step and continues bit for bit" {
  run_world 1 "$TMP/ref" "${ARGS[@]}" --set training.steps=40
  ck=(--set checkpoint.uri="file://$TMP/ck" --set checkpoint.intervalSteps=1 --set training.steps=40)
  mkdir -p "$TMP/k"
  start_rank 1 0 "$(free_port)" 0 "$TMP/k" "${ARGS[@]}" "${ck[@]}"
  for _ in $(seq 1 600); do grep -q "event=saved step=12" "$TMP/k/rank-0.log" 2>/dev/null && break; sleep 0.05; done
  sleep 0.0$((RANDOM % 10))
  pkill -KILL -f "checkpoint.uri=file://$TMP/ck" || true
  wait
  last=$(grep -o 'event=saved step=[0-9]*' "$TMP/k/rank-0.log" | tail -1 | grep -o '[0-9]*$')
  echo "killed after the checkpoint of step $last"
  run_world 1 "$TMP/r" "${ARGS[@]}" "${ck[@]}"
  from=$(grep -o 'event=resumed step=[0-9]*' "$TMP/r/rank-0.log" | grep -o '[0-9]*$')
  echo "resumed from step $from"
  [ "$from" -ge "$last" ]
  same_from "$TMP/ref/metrics.jsonl" "$TMP/r/metrics.jsonl" "$from"
}

@test "SIGTERM saves the last completed step, and the next run continues from it bit for bit" {
  run_world 2 "$TMP/ref" "${ARGS[@]}" --set training.sharding=full --set training.steps=30
  ck=(--set checkpoint.uri="file://$TMP/ck" --set checkpoint.intervalSteps=1000 --set training.sharding=full
      --set training.steps=30 --set training.logInterval=1)
  mkdir -p "$TMP/t"
  port=$(free_port)
  for r in 0 1; do start_rank 2 $r "$port" 0 "$TMP/t" "${ARGS[@]}" "${ck[@]}"; done
  for _ in $(seq 1 600); do grep -q "step=5/" "$TMP/t/rank-0.log" 2>/dev/null && break; sleep 0.05; done
  pkill -TERM -f "checkpoint.uri=file://$TMP/ck" || true
  wait
  for r in 0 1; do [ "$(cat "$TMP/t/rank-$r.rc")" -eq 143 ]; done
  tail -1 "$TMP/t/rank-0.log"
  grep -q "every rank ended after step [0-9]*, checkpointed" "$TMP/t/rank-0.log"
  run_world 2 "$TMP/r" "${ARGS[@]}" "${ck[@]}"
  from=$(grep -o 'event=resumed step=[0-9]*' "$TMP/r/rank-0.log" | grep -o '[0-9]*$')
  echo "stopped and resumed at step $from"
  [ "$from" -ge 5 ]
  same_from "$TMP/ref/metrics.jsonl" "$TMP/r/metrics.jsonl" "$from"
}

@test "a checkpoint of another model is refused with exit 2, naming both" {
  run_world 1 "$TMP/a" "${ARGS[@]}" --set checkpoint.uri="file://$TMP/ck" --set training.steps=2
  run "$WORKER" train "${ARGS[@]}" --set checkpoint.uri="file://$TMP/ck" --set model.depth=2
  [ "$status" -eq 2 ]
  [[ "$output" == *"class=config"*"was written for the model"*'"depth":4'*"not this run's"*'"depth":2'* ]]
}

@test "export writes the newest complete step, or the one named, as the run's own export" {
  run_world 1 "$TMP/a" "${ARGS[@]}" --set checkpoint.uri="file://$TMP/ck" --set checkpoint.intervalSteps=4 \
    --set training.exportPath="$TMP/run.st"
  "$WORKER" export --from "file://$TMP/ck" --out "$TMP/last.st"
  cmp "$TMP/run.st" "$TMP/last.st"
  "$WORKER" export --from "file://$TMP/ck/step-000000004" --out "$TMP/four.st"
  ! cmp -s "$TMP/run.st" "$TMP/four.st"
  run "$WORKER" export --from "file://$TMP/ck/step-000000005" --out "$TMP/five.st"
  [ "$status" -ne 0 ]
  [[ "$output" == *"step-000000005/manifest.json"* ]]
  [ ! -e "$TMP/five.st" ]
}

@test "a full disk under file:// is a clear retryable error and the previous checkpoint stays intact" {
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
