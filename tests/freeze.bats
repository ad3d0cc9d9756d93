#!/usr/bin/env bats
# tests/freeze.bats - training.freeze end to end (worker/train/freeze.c, the
# model's early-stopping backward, the optimizer without state for frozen
# tensors, the strategies' collectives and checkpoint segments): a list
# that freezes the stem, block 0, block 1's attention and the final norm
# (fmnist_tiny, depth 4) leaves those weights exactly as they started while
# the rest trains, with AdamW state for the trainable ones only; 2 ranks in
# every sharding mode follow the one-process run; a run resumed at step 4 of
# 8 continues bit for bit at 2 ranks in every mode; resuming with
# another list is refused naming both; a prefix matching nothing and a list
# freezing everything are exit 2 naming training.freeze, before any data.
# (tests/test_freeze.c: matching, gradients bit for bit against no freeze;
# tests/finetune.bats: the linear probe.)
#
# BUILD (default build) points at the build tree; WORKER may override.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

load ranks_helpers
load recipe_helpers

setup_file() { recipe_data; }

setup() {
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  TMP=$(mktemp -d)
  recipe_args --set training.globalBatchSize=16
  FREEZE=(--set "training.freeze=[cls_token, pos_embed, patch_embed, blocks.0, blocks.1.attn, norm]")
}

# frozen INIT TRAINED: the tensors FREEZE names are bit for bit those of
# INIT in TRAINED, and every other tensor changed
frozen() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in h.items()
            if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
pre = ["cls_token", "pos_embed", "patch_embed", "blocks.0", "blocks.1.attn", "norm"]
bad = []
nf = 0
for k in a:
    f = any(k == p or k.startswith(p + ".") for p in pre)
    nf += f
    if f != (a[k] == b[k]):
        bad.append("%s (%s)" % (k, "frozen, changed" if f else "trainable, unchanged"))
print("%d tensors frozen, %d trained" % (nf, len(a) - nf))
assert nf == 4 + 12 + 4 + 2, nf
sys.exit("; ".join(bad) if bad else 0)
PY
}

@test "frozen weights stay as they started, the rest trains, and 2 ranks in every sharding mode follow one process" {
  # the initial weights: one step at a near-zero lr moves every trainable
  # tensor a little and no frozen one
  run_world 1 "$TMP/init" "${ARGS[@]}" "${FREEZE[@]}" --set training.steps=1 \
    --set training.optimizer.warmupSteps=0 --set training.optimizer.lr=1e-9 \
    --set training.exportPath="$TMP/init.st"
  run_world 1 "$TMP/w1" "${ARGS[@]}" "${FREEZE[@]}" --set training.exportPath="$TMP/w1.st"
  # fmnist_tiny: 205066 parameters; frozen: cls 64, pos 1088, patch_embed
  # 3200, block 0 49984, block 1's attn 16640, norm 128
  grep -q "event=freeze prefixes=cls_token,pos_embed,patch_embed,blocks.0,blocks.1.attn,norm frozen_params=71104 trainable_params=133962 frozen_tensors=22 trainable_tensors=34" "$TMP/w1/rank-0.log" \
    || { grep "event=freeze" "$TMP/w1/rank-0.log"; false; }
  # AdamW state (m and v, 8 bytes) for the trainable parameters alone
  grep -q "event=shard rank=0 world=1 sharding=none params=205066 .* shard_params=133962 .* optim_bytes=1071696" "$TMP/w1/rank-0.log" \
    || { grep "event=shard" "$TMP/w1/rank-0.log"; false; }
  frozen "$TMP/init.st" "$TMP/w1.st"
  for mode in none grad-op full; do
    run_world 2 "$TMP/$mode" "${ARGS[@]}" "${FREEZE[@]}" --set training.sharding=$mode \
      --set training.exportPath="$TMP/$mode.st"
    echo "world 2, sharding $mode:"
    compare "$TMP/w1/metrics.jsonl" "$TMP/$mode/metrics.jsonl" 1e-5
    weights "$TMP/w1.st" "$TMP/$mode.st" 2e-4
    frozen "$TMP/init.st" "$TMP/$mode.st"
  done
  # grad-op packs the trainable runs of each slice: 133962 trainable
  # parameters over 2 slices of 102533, the larger share being rank 1's
  grep -q "event=freeze_packing rank=0 world=2 packed=[0-9]* slice=102533 runs=2" "$TMP/grad-op/rank-0.log" \
    || { grep "event=freeze_packing" "$TMP/grad-op/rank-"*.log; false; }
}

@test "with a freeze list, resumed at step 4 of 8, 2 ranks in every sharding mode continue bit for bit; another list is refused" {
  for w in 2; do
    for mode in none grad-op full; do
      CK=(--set checkpoint.uri="file://$TMP/ck-$w-$mode" --set checkpoint.intervalSteps=4
          --set training.sharding=$mode)
      run_world "$w" "$TMP/a-$w-$mode" "${ARGS[@]}" "${FREEZE[@]}" "${CK[@]}" \
        --set training.exportPath="$TMP/a-$w-$mode.st"
      [ -f "$TMP/ck-$w-$mode/step-000000004/manifest.json" ]
      python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["model"]["freeze"] != ["cls_token", "pos_embed", "patch_embed", "blocks.0", "blocks.1.attn", "norm"])' \
        "$TMP/ck-$w-$mode/step-000000004/manifest.json"
      rm -r "$TMP/ck-$w-$mode/step-000000008"   # as if it died after step 4's checkpoint
      run_world "$w" "$TMP/b-$w-$mode" "${ARGS[@]}" "${FREEZE[@]}" "${CK[@]}" \
        --set training.exportPath="$TMP/b-$w-$mode.st"
      grep -q "event=resumed step=4 from_world_size=$w from_sharding=$mode" "$TMP/b-$w-$mode/rank-0.log"
      echo "world $w, sharding $mode: steps 5-8 and the weights identical"
      same_from "$TMP/a-$w-$mode/metrics.jsonl" "$TMP/b-$w-$mode/metrics.jsonl" 4
      cmp "$TMP/a-$w-$mode.st" "$TMP/b-$w-$mode.st"
    done
  done
  # another list, or none, against that checkpoint: refused, naming both
  for other in "training.freeze=[cls_token, pos_embed]" "training.freeze=[]"; do
    run "$WORKER" train "${ARGS[@]}" --set "$other" --set checkpoint.uri="file://$TMP/ck-2-none"
    [ "$status" -eq 2 ] || { echo "$other: exit $status: ${output: -1000}"; false; }
    [[ "$output" == *"class=config"* ]]
    # (the log quotes the message: its quotes are escaped)
    [[ "$output" == *'was written for the model {'*'\"freeze\":[\"cls_token\",\"pos_embed\",\"patch_embed\",\"blocks.0\",\"blocks.1.attn\",\"norm\"]}'*"not this run's"* ]]
  done
}

@test "a freeze prefix that matches nothing, or a list that freezes everything, is exit 2 naming training.freeze, before any data" {
  run "$WORKER" train "${ARGS[@]}" --set "training.freeze=[head, blocks.4]" \
    --set data.uri=/nonexistent
  [ "$status" -eq 2 ]
  [[ "$output" == *"class=config"* ]]
  [[ "$output" == *"training.freeze[1]=blocks.4 matches no parameter"* ]]
  [[ "$output" != *"event=start"* ]]
  printf 'training:\n  freeze: [cls_token, pos_embed, patch_embed, blocks, norm, head]\n' > "$TMP/all.yaml"
  run "$WORKER" train --config "$TMP/all.yaml" "${ARGS[@]}" --set data.uri=/nonexistent
  [ "$status" -eq 2 ]
  [[ "$output" == *"training.freeze freezes every parameter"* ]]
  run "$WORKER" train "${ARGS[@]}" --set "training.freeze=[blocks,]"
  [ "$status" -eq 2 ]
  [[ "$output" == *"training.freeze[1]: expected a non-empty string"* ]]
}
