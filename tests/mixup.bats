#!/usr/bin/env bats
# tests/mixup.bats - data.mixup / data.cutmix (worker/data/mixup.c, wired
# into worker/train/train.c): the mixing and the soft targets against a
# PyTorch reference of timm's Mixup (tests/ref/mixup_torch.py, through the
# driver build/bin/mixup_check from tests/ref/mixup_check.c), the Beta
# sampler against torch's, and training with mixup 0.8, cutmix 1.0 and label
# smoothing 0.1 at 2 ranks: the loss is finite and falls, the run follows
# one process (the draws are keyed by the step and the micro-batch's place
# in the global batch, not by the rank), and a resumed run continues bit for
# bit. Bad values exit 2 naming their key.
#
# BUILD (default build) points at the build tree; WORKER and MIXUP_CHECK may
# name others (the sanitized ones).

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

load ranks_helpers
load recipe_helpers

# every training image and 400 test images (recipe_helpers' fmnist_short):
# the runs train as on the whole data set, and the evaluation at the end of
# each stays short
setup_file() { fmnist_short "$BATS_FILE_TMPDIR/fm" 400; }

setup() {
  cd "$BATS_TEST_DIRNAME/.."
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  MIXUP_CHECK=${MIXUP_CHECK:-$BUILD/bin/mixup_check}
  TMP=$(mktemp -d)
  ARGS=(--set data.uri="file://$BATS_FILE_TMPDIR/fm"
        --set training.steps=100 --set training.optimizer.warmupSteps=5
        --set training.globalBatchSize=64 --set training.microBatchSize=8
        --set training.threads=1 --set training.exportPath=
        --set data.mixup=0.8 --set data.cutmix=1.0 --set training.labelSmoothing=0.1
        --set training.rendezvousTimeoutSeconds=60 --set training.collectiveTimeoutSeconds=60)
}

@test "mixup and cutmix equal the torch reference of timm's Mixup for fixed draws: images, targets, lambda, box" {
  [ -x "$MIXUP_CHECK" ] || { echo "no $MIXUP_CHECK (make $MIXUP_CHECK)"; false; }
  run /usr/bin/python3 tests/ref/mixup_torch.py apply --bin "$MIXUP_CHECK"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"apply: 306 cases, 0 failed"* ]]
}

@test "the Beta sampler draws the distribution torch's Beta draws (Kolmogorov-Smirnov, fixed seeds)" {
  [ -x "$MIXUP_CHECK" ] || { echo "no $MIXUP_CHECK (make $MIXUP_CHECK)"; false; }
  run /usr/bin/python3 tests/ref/mixup_torch.py beta --bin "$MIXUP_CHECK"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"beta: 8 pairs, 0 failed"* ]]
}

# falls A.jsonl: every loss finite, and the last 20 steps' mean at least 0.1
# below the first 20's
falls() {
  python3 - "$1" <<'PY'
import json, math, sys
l = [json.loads(x)["loss"] for x in open(sys.argv[1]) if '"loss"' in x]
assert len(l) == 100, len(l)
assert all(math.isfinite(v) for v in l), l
first, last = sum(l[:20]) / 20, sum(l[-20:]) / 20
print("loss: first 20 steps %.4f, last 20 %.4f" % (first, last))
sys.exit(0 if last < first - 0.1 else 1)
PY
}

@test "2 ranks with mixup 0.8, cutmix 1.0 and label smoothing 0.1 train (finite, falling loss) and follow one process" {
  run_world 2 "$TMP/two" "${ARGS[@]}"
  grep -q "event=mixup mixup_alpha=0.8 cutmix_alpha=1 cutmix_minmax=unset prob=1 switch_prob=0.5 label_smoothing=0.1 mode=batch" \
    "$TMP/two/rank-0.log"
  falls "$TMP/two/metrics.jsonl"
  # each rank mixes its own micro-batches, drawn by the step and the
  # micro-batch's place in the global batch: the same mixing as one process
  run_world 1 "$TMP/one" "${ARGS[@]}"
  compare "$TMP/one/metrics.jsonl" "$TMP/two/metrics.jsonl" 1e-4
  # and the mixing does something: without it the losses differ
  run_world 1 "$TMP/plain" "${ARGS[@]}" --set data.mixup=0 --set data.cutmix=0
  run grep -q "event=mixup" "$TMP/plain/rank-0.log"
  [ "$status" -eq 1 ]
  run compare "$TMP/one/metrics.jsonl" "$TMP/plain/metrics.jsonl" 1e-2
  echo "$output"
  [ "$status" -eq 1 ]
}

@test "2 ranks with mixup and cutmix resumed at step 4 of 8 continue bit for bit" {
  for mode in none full; do
    # (a resume needs no long run: 8 steps, the checkpoint at 4)
    CK=(--set checkpoint.uri="file://$TMP/ck-$mode" --set checkpoint.intervalSteps=4
        --set training.sharding=$mode --set training.steps=8 --set training.optimizer.warmupSteps=2)
    run_world 2 "$TMP/a-$mode" "${ARGS[@]}" "${CK[@]}" --set training.exportPath="$TMP/a-$mode.st"
    [ -f "$TMP/ck-$mode/step-000000004/manifest.json" ]
    rm -r "$TMP/ck-$mode/step-000000008"   # as if it died after step 4's checkpoint
    run_world 2 "$TMP/b-$mode" "${ARGS[@]}" "${CK[@]}" --set training.exportPath="$TMP/b-$mode.st"
    grep -q "event=resumed step=4 from_world_size=2 from_sharding=$mode" "$TMP/b-$mode/rank-0.log"
    echo "sharding $mode: steps 5-8 and the weights identical"
    same_from "$TMP/a-$mode/metrics.jsonl" "$TMP/b-$mode/metrics.jsonl" 4
    cmp "$TMP/a-$mode.st" "$TMP/b-$mode.st"
  done
}

@test "bad mixup settings exit 2 naming their key" {
  run "$WORKER" train --set data.mixup=-0.8
  [ "$status" -eq 2 ]
  [[ "$output" == *"data.mixup=-0.8 is out of range [0, 1000]"* ]]
  run "$WORKER" train --set data.cutmix=-1
  [ "$status" -eq 2 ]
  [[ "$output" == *"data.cutmix=-1 is out of range"* ]]
  run "$WORKER" train --set data.mixup=0.8 --set data.mixupMode=pair
  [ "$status" -eq 2 ]
  [[ "$output" == *"data.mixupMode=pair is not implemented"* ]]
  run "$WORKER" train --set data.cutmixMinMax=0.9,0.1
  [ "$status" -eq 2 ]
  [[ "$output" == *"data.cutmixMinMax=[0.9, 0.1]: the minimum 0.9 exceeds the maximum 0.1"* ]]
  run "$WORKER" train --set data.cutmix=1 --set training.microBatchSize=7 --set training.globalBatchSize=63
  [ "$status" -eq 2 ]
  [[ "$output" == *"training.microBatchSize=7 is odd"* ]]
}
