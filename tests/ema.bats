#!/usr/bin/env bats
# tests/ema.bats - training.ema end to end (worker/train/ema.c through the
# strategies of worker/train/dp*.c, the checkpoint's fourth array in
# worker/ckpt/ckpt_writer.c and ckpt_reader.c, the evaluation and export of worker/train/train.c and
# `vitjob-worker export`): 2 ranks in every sharding mode end with the
# one-process EMA; a resumed run continues bit for bit, EMA included, and
# across world sizes within the ranks tests' bound; a checkpoint without an
# EMA starts it from its weights; evaluation and export say they are the
# EMA's. The EMA update itself against timm's, in PyTorch:
# tests/ref/check_against_torch.py.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=600}"

load ranks_helpers
load recipe_helpers

setup_file() { recipe_data; }

setup() {
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  TMP=$(mktemp -d)
  recipe_args
  EMA=(--set training.ema.decay=0.8)
}

# differ A B MIN: the two safetensors exports differ by at least MIN somewhere
# (absolute): the EMA is not the weights
differ() {
  ! weights "$1" "$2" "$3" > /dev/null
}

@test "2 ranks in every sharding mode end with the one-process EMA weights, which are not the weights" {
  run_world 1 "$TMP/raw" "${ARGS[@]}" --set training.exportPath="$TMP/raw.st"
  run_world 1 "$TMP/w1" "${ARGS[@]}" "${EMA[@]}" --set training.exportPath="$TMP/w1.st"
  differ "$TMP/raw.st" "$TMP/w1.st" 1e-3
  # the EMA changes nothing of the training itself
  cmp <(grep '"loss"' "$TMP/raw/metrics.jsonl") <(grep '"loss"' "$TMP/w1/metrics.jsonl")
  for mode in none grad-op full; do
    run_world 2 "$TMP/$mode" "${ARGS[@]}" "${EMA[@]}" \
      --set training.sharding=$mode --set training.exportPath="$TMP/$mode.st"
    echo "world 2, sharding $mode: the EMA against one process's"
    weights "$TMP/w1.st" "$TMP/$mode.st" 2e-4
    grep -q "event=exported path=$TMP/$mode.st weights=ema" "$TMP/$mode/rank-0.log"
    # each rank keeps the EMA of what it updates: half the parameters but for
    # none (every rank updates everything)
    for r in 0 1; do grep -o 'event=shard.*ema_bytes=[0-9]*' "$TMP/$mode/rank-$r.log"; done
  done
  grep -q "shard_params=102533 .*ema_bytes=410132" "$TMP/grad-op/rank-0.log"
  grep -q "shard_params=205066 .*ema_bytes=820264" "$TMP/none/rank-1.log"
}

@test "the evaluations and the summary are the EMA's and say so, with the raw weights' accuracy at the end" {
  run_world 1 "$TMP/a" "${ARGS[@]}" "${EMA[@]}" --set training.evalInterval=4
  grep 'comp=eval' "$TMP/a/rank-0.log"
  grep -q 'comp=eval step=4 test_accuracy=[0-9.]* .* ema=1$' "$TMP/a/rank-0.log"
  grep -q 'comp=eval step=8 test_accuracy=[0-9.]* .* ema=0$' "$TMP/a/rank-0.log"
  grep -q 'comp=eval step=8 test_accuracy=[0-9.]* .* ema=1$' "$TMP/a/rank-0.log"
  grep -q '"step":4,"test_accuracy":[0-9.]*,"train_seconds":[0-9.]*,"ema":true}' "$TMP/a/metrics.jsonl"
  tail -1 "$TMP/a/rank-0.out"
  python3 - "$TMP/a/rank-0.out" "$TMP/a/rank-0.log" <<'PY'
import json, re, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
log = open(sys.argv[2]).read()
ema = float(re.search(r"step=8 test_accuracy=([0-9.]+) .* ema=1\n", log).group(1))
raw = float(re.search(r"step=8 test_accuracy=([0-9.]+) .* ema=0\n", log).group(1))
assert s["ema"] is True, s
assert abs(s["test_accuracy"] - ema) < 1e-4 and abs(s["raw_test_accuracy"] - raw) < 1e-4, s
assert s["test_accuracy"] != s["raw_test_accuracy"], "the EMA evaluated as the weights"
print("EMA test accuracy %.4f, the weights' %.4f" % (ema, raw))
PY
  # without training.ema: no ema keys in the evaluation lines, "ema":false in the summary
  run_world 1 "$TMP/b" "${ARGS[@]}" --set training.steps=2 --set training.optimizer.warmupSteps=1
  ! grep -q 'ema=' "$TMP/b/rank-0.log"
  tail -1 "$TMP/b/rank-0.out" | grep -q '"ema":false,"images_per_sec"'
}

@test "evaluating the EMA mid-run leaves the training bit for bit as it was, fp32 and bf16-mixed, 1 and 2 ranks" {
  for cfg in "1 none fp32" "2 full bf16-mixed"; do
    read -r w mode prec <<<"$cfg"
    set_=(--set training.sharding=$mode --set training.precision=$prec --set training.evalInterval=4)
    run_world "$w" "$TMP/plain-$w-$mode-$prec" "${ARGS[@]}" "${set_[@]}"
    run_world "$w" "$TMP/ema-$w-$mode-$prec" "${ARGS[@]}" "${EMA[@]}" "${set_[@]}"
    grep -q 'step=4 .* ema=1$' "$TMP/ema-$w-$mode-$prec/rank-0.log"
    echo "world $w, sharding $mode, $prec: the losses of the 8 steps identical"
    cmp <(grep '"loss"' "$TMP/plain-$w-$mode-$prec/metrics.jsonl") \
        <(grep '"loss"' "$TMP/ema-$w-$mode-$prec/metrics.jsonl")
  done
}

@test "resumed at step 4 of 8 with the EMA, 1 and 2 ranks in every sharding mode continue bit for bit" {
  for w in 1 2; do
    for mode in none grad-op full; do
      # 1 rank unsharded; 2 ranks in the modes that shard the EMA
      [ "$w" -eq 1 ] && [ "$mode" != none ] && continue
      [ "$w" -eq 2 ] && [ "$mode" = none ] && continue
      CK=(--set checkpoint.uri="file://$TMP/ck-$w-$mode" --set checkpoint.intervalSteps=4
          --set training.sharding=$mode --set training.ema.warmup=true)
      run_world "$w" "$TMP/a-$w-$mode" "${ARGS[@]}" "${EMA[@]}" "${CK[@]}" \
        --set training.exportPath="$TMP/a-$w-$mode.st"
      grep -q '"ema":	true' "$TMP/ck-$w-$mode/step-000000004/manifest.json"
      rm -r "$TMP/ck-$w-$mode/step-000000008"   # as if it died after step 4's checkpoint
      run_world "$w" "$TMP/b-$w-$mode" "${ARGS[@]}" "${EMA[@]}" "${CK[@]}" \
        --set training.exportPath="$TMP/b-$w-$mode.st"
      grep -q "event=resumed step=4 from_world_size=$w from_sharding=$mode" "$TMP/b-$w-$mode/rank-0.log"
      ! grep -q "event=ema_from_weights" "$TMP/b-$w-$mode/rank-0.log"
      echo "world $w, sharding $mode: the EMA exports identical"
      cmp "$TMP/a-$w-$mode.st" "$TMP/b-$w-$mode.st"
    done
  done
}

@test "kill -9 after a checkpoint: the resumed run ends with the uninterrupted run's EMA, bit for bit" {
  run_world 1 "$TMP/ref" "${ARGS[@]}" "${EMA[@]}" --set training.steps=24 \
    --set training.exportPath="$TMP/ref.st"
  CK=(--set checkpoint.uri="file://$TMP/ck" --set checkpoint.intervalSteps=1 --set training.steps=24)
  mkdir -p "$TMP/k"
  start_rank 1 0 "$(free_port)" 0 "$TMP/k" "${ARGS[@]}" "${EMA[@]}" "${CK[@]}"
  rank0_logged "$TMP/k" "event=saved step=8" "checkpoint of step 8"
  sleep 0.0$((RANDOM % 10))
  pkill -KILL -f "checkpoint.uri=file://$TMP/ck" || true
  wait_ranks
  # a loaded machine may let the run go on (even to its end) before the
  # kill: the resume must start at the last step it saved, or later
  last=$(grep -o 'event=saved step=[0-9]*' "$TMP/k/rank-0.log" | tail -1 | grep -o '[0-9]*$')
  echo "killed after the checkpoint of step $last (exit $(cat "$TMP/k/rank-0.rc"))"
  run_world 1 "$TMP/r" "${ARGS[@]}" "${EMA[@]}" "${CK[@]}" --set training.exportPath="$TMP/r.st"
  from=$(grep -o 'event=resumed step=[0-9]*' "$TMP/r/rank-0.log" | grep -o '[0-9]*$')
  echo "resumed from step $from"
  [ "$from" -ge 8 ] && [ "$from" -ge "$last" ]
  cmp "$TMP/ref.st" "$TMP/r.st"
}

@test "resume with the EMA on another world size: 2 ranks to 1 and 1 to 2 end with the one-process EMA" {
  run_world 1 "$TMP/one" "${ARGS[@]}" "${EMA[@]}" --set training.exportPath="$TMP/one.st"
  CK=(--set checkpoint.uri="file://$TMP/c21" --set checkpoint.intervalSteps=4)
  run_world 2 "$TMP/two" "${ARGS[@]}" "${EMA[@]}" "${CK[@]}" --set training.sharding=grad-op
  rm -r "$TMP/c21/step-000000008"
  run_world 1 "$TMP/to1" "${ARGS[@]}" "${EMA[@]}" "${CK[@]}" --set training.exportPath="$TMP/to1.st"
  grep -q "event=resumed step=4 from_world_size=2 from_sharding=grad-op world_size=1" "$TMP/to1/rank-0.log"
  weights "$TMP/one.st" "$TMP/to1.st" 2e-4
  CK=(--set checkpoint.uri="file://$TMP/c12" --set checkpoint.intervalSteps=4)
  run_world 1 "$TMP/solo" "${ARGS[@]}" "${EMA[@]}" "${CK[@]}"
  rm -r "$TMP/c12/step-000000008"
  run_world 2 "$TMP/to2" "${ARGS[@]}" "${EMA[@]}" "${CK[@]}" --set training.sharding=full \
    --set training.exportPath="$TMP/to2.st"
  grep -q "event=resumed step=4 from_world_size=1 from_sharding=none world_size=2" "$TMP/to2/rank-0.log"
  weights "$TMP/one.st" "$TMP/to2.st" 2e-4
}

@test "a checkpoint saved without an EMA resumes with training.ema: the EMA starts from its weights, logged" {
  CK=(--set checkpoint.uri="file://$TMP/ck" --set checkpoint.intervalSteps=4)
  run_world 1 "$TMP/a" "${ARGS[@]}" "${CK[@]}" --set training.exportPath="$TMP/a.st"
  ! grep -q '"ema"' "$TMP/ck/step-000000004/manifest.json"
  rm -r "$TMP/ck/step-000000008"
  run_world 1 "$TMP/b" "${ARGS[@]}" "${EMA[@]}" "${CK[@]}" --set training.exportPath="$TMP/b.st"
  grep 'event=ema_from_weights' "$TMP/b/rank-0.log"
  grep -q 'event=ema_from_weights step=4 reason="the checkpoint has no EMA' "$TMP/b/rank-0.log"
  # the training goes on as it would have; the export is an EMA, not the weights
  cmp <(grep '"loss"' "$TMP/a/metrics.jsonl" | tail -4) <(grep '"loss"' "$TMP/b/metrics.jsonl")
  differ "$TMP/a.st" "$TMP/b.st" 1e-4
  # and its next checkpoint has one
  grep -q '"ema":	true' "$TMP/ck/step-000000008/manifest.json"
}

@test "vitjob-worker export writes the EMA of a step that has one, and --raw its weights" {
  CK=(--set checkpoint.uri="file://$TMP/ck" --set checkpoint.intervalSteps=4)
  run_world 1 "$TMP/a" "${ARGS[@]}" "${EMA[@]}" "${CK[@]}" --set training.exportPath="$TMP/run.st"
  run_world 1 "$TMP/raw" "${ARGS[@]}" --set training.exportPath="$TMP/raw.st"
  "$WORKER" checkpoints --uri "file://$TMP/ck" | grep -q "^8 .*complete .* ema=1$"
  "$WORKER" export --from "file://$TMP/ck" --out "$TMP/last.st" 2> "$TMP/export.log"
  grep -q "event=exported step=8 .* weights=ema" "$TMP/export.log"
  cmp "$TMP/run.st" "$TMP/last.st"
  "$WORKER" export --from "file://$TMP/ck" --out "$TMP/weights.st" --raw
  cmp "$TMP/raw.st" "$TMP/weights.st"
}
