#!/usr/bin/env bats
# tests/regularization.bats - training.dropPath and training.labelSmoothing
# end to end (worker/train/droppath.c, worker/train/smoothing.c, the
# model's drop path and soft-target loss as worker/train/train.c uses them):
# both change training; 2 ranks in every sharding mode (and full with
# activation checkpointing) follow the one-process run, because the masks
# are keyed by each sample's place in the global batch; a checkpointed run
# resumes bit for bit at 1 and 2 ranks in every mode; bad values are refused
# with exit 2, naming the key.
#
# BUILD (default build) points at the build tree; WORKER may override.

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
  REG=(--set training.dropPath=0.1 --set training.labelSmoothing=0.1)
}

@test "dropPath and labelSmoothing each change training; 2 ranks in every sharding mode follow the one-process run" {
  run_world 1 "$TMP/reg1" "${ARGS[@]}" "${REG[@]}" --set training.exportPath="$TMP/reg1.st"
  # each key does something: without it the losses are others
  run_world 1 "$TMP/plain" "${ARGS[@]}"
  run_world 1 "$TMP/smooth" "${ARGS[@]}" --set training.labelSmoothing=0.1
  run cmp <(grep '"loss"' "$TMP/plain/metrics.jsonl") <(grep '"loss"' "$TMP/smooth/metrics.jsonl")
  [ "$status" -eq 1 ] || { echo "labelSmoothing changed no loss"; false; }
  run cmp <(grep '"loss"' "$TMP/smooth/metrics.jsonl") <(grep '"loss"' "$TMP/reg1/metrics.jsonl")
  [ "$status" -eq 1 ] || { echo "dropPath changed no loss"; false; }
  for mode in none grad-op full full-ckpt; do
    extra=(--set training.sharding="${mode%-ckpt}")
    [ "$mode" = full-ckpt ] && extra+=(--set training.activationCheckpointing=true)
    run_world 2 "$TMP/$mode" "${ARGS[@]}" "${REG[@]}" "${extra[@]}" \
      --set training.exportPath="$TMP/$mode.st"
    echo "world 2, sharding $mode:"
    compare "$TMP/reg1/metrics.jsonl" "$TMP/$mode/metrics.jsonl" 1e-5
    weights "$TMP/reg1.st" "$TMP/$mode.st" 2e-4
  done
}

@test "with dropPath and labelSmoothing, resumed at step 4 of 8, 1 and 2 ranks in every sharding mode continue bit for bit" {
  for w in 1 2; do
    for mode in none grad-op full; do
      [ "$w" -eq 1 ] && [ "$mode" != none ] && continue
      CK=(--set checkpoint.uri="file://$TMP/ck-$w-$mode" --set checkpoint.intervalSteps=4
          --set training.sharding=$mode)
      run_world "$w" "$TMP/a-$w-$mode" "${ARGS[@]}" "${REG[@]}" "${CK[@]}" \
        --set training.exportPath="$TMP/a-$w-$mode.st"
      [ -f "$TMP/ck-$w-$mode/step-000000004/manifest.json" ]
      rm -r "$TMP/ck-$w-$mode/step-000000008"   # as if it died after step 4's checkpoint
      run_world "$w" "$TMP/b-$w-$mode" "${ARGS[@]}" "${REG[@]}" "${CK[@]}" \
        --set training.exportPath="$TMP/b-$w-$mode.st"
      grep -q "event=resumed step=4 from_world_size=$w from_sharding=$mode" "$TMP/b-$w-$mode/rank-0.log"
      echo "world $w, sharding $mode: steps 5-8 and the weights identical"
      same_from "$TMP/a-$w-$mode/metrics.jsonl" "$TMP/b-$w-$mode/metrics.jsonl" 4
      cmp "$TMP/a-$w-$mode.st" "$TMP/b-$w-$mode.st"
    done
  done
}

@test "a dropPath or labelSmoothing outside [0, 1) is exit 2 naming the key, from --set and from a config file" {
  for kv in dropPath=1.5 dropPath=1 dropPath=-0.1 labelSmoothing=1 labelSmoothing=2 \
            labelSmoothing=-0.5 dropPath=lots; do
    # no data: a value wrongly accepted fails fast (exit 3) instead of training
    run "$WORKER" train --set "training.$kv" --set data.uri="$TMP/none"
    echo "training.$kv: exit $status: $output"
    [ "$status" -eq 2 ]
    [[ "$output" == *"training.${kv%%=*}"* ]]
  done
  printf 'training:\n  labelSmoothing: 1.0\n' > "$TMP/bad.yaml"
  run "$WORKER" train --config "$TMP/bad.yaml" --set data.uri="$TMP/none"
  echo "$output"
  [ "$status" -eq 2 ]
  [[ "$output" == *"training.labelSmoothing=1 is out of range [0, 1)"* ]]
}
