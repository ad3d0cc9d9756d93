#!/usr/bin/env bats
# tests/fp16.bats - training.precision=fp16-mixed on the CPU (the cpu-fp16
# emulation, kernels/ops_cpu.c) with its dynamic loss scaler
# (worker/train/loss_scale.c): it tracks the fp32 losses as bf16-mixed does
# (the same bound); an overflow injected on one rank (the test-only
# VITJOB_TEST_INJECT_OVERFLOW) skips that step on every rank, is logged on
# each and counted in the metrics and the summary; 2 ranks in every sharding
# mode follow the one-process run through the skips; a run resumed at step
# 4 of 8 continues bit for bit, the scaler's state (in the manifest)
# included. The scaler's rules against torch are tests/test_loss_scale.c.
#
# BUILD (default build) points at the build tree; WORKER may name another.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

load ranks_helpers
load recipe_helpers

# a small Fashion-MNIST: the first 800 training and 64 test images (the
# evaluation at the end of each run stays short under full sharding)
setup_file() { fmnist_subset "$BATS_FILE_TMPDIR/fm" 800 64; }

setup() {
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  TMP=$(mktemp -d)
  DATA=(--set data.uri="file://$BATS_FILE_TMPDIR/fm")
  ARGS=("${DATA[@]}" --set training.steps=8 --set training.optimizer.warmupSteps=2
        --set training.globalBatchSize=16 --set training.microBatchSize=4
        --set training.threads=1 --set training.exportPath= --set training.precision=fp16-mixed
        --set training.rendezvousTimeoutSeconds=60 --set training.collectiveTimeoutSeconds=60)
}

@test "fp16-mixed on the CPU runs cpu-fp16 and tracks the fp32 losses for 20 steps within bf16-mixed's bound 0.1 (and differs from them)" {
  args=("${DATA[@]}" --set training.steps=20 --set training.optimizer.warmupSteps=3 --set training.exportPath=
        --set training.globalBatchSize=32 --set training.microBatchSize=8 --set training.threads=1)
  "$WORKER" train "${args[@]}" --metrics "$TMP/f.jsonl" 2>/dev/null >/dev/null
  "$WORKER" train "${args[@]}" --set training.precision=bf16-mixed --metrics "$TMP/b.jsonl" 2>/dev/null >/dev/null
  "$WORKER" train "${args[@]}" --set training.precision=fp16-mixed --metrics "$TMP/h.jsonl" \
    2>"$TMP/h.log" >/dev/null
  grep -q "event=start backend=cpu-fp16 precision=fp16-mixed " "$TMP/h.log"
  ! grep -q "event=step_skipped" "$TMP/h.log"   # no overflow at 2^16 here
  loss() { sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$1"; }
  paste <(loss "$TMP/f.jsonl") <(loss "$TMP/b.jsonl") <(loss "$TMP/h.jsonl") > "$TMP/loss"
  [ "$(wc -l < "$TMP/loss")" -eq 20 ]
  awk '{ b = $1 - $2; if (b < 0) b = -b; if (b > mb) mb = b
         h = $1 - $3; if (h < 0) h = -h; if (h > mh) mh = h; if (h > 0) differ = 1 }
       END { printf "max |fp32 - bf16| = %g, max |fp32 - fp16| = %g\n", mb, mh
             exit !(mh < 0.1 && differ) }' "$TMP/loss"
}

@test "an overflow on one rank skips the step on every rank, logged and counted; 2 ranks in every mode follow one process; resumed at step 4 of 8 it continues bit for bit, scaler included" {
  for w in 1 2; do
    for mode in none grad-op full; do
      [ "$w" -eq 1 ] && [ "$mode" != none ] && continue
      # step 3: rank 1's gradients only (rank 0 alone at world 1); step 6, after the resume: rank 0's
      inject="3@$((w - 1)),6@0"
      CK=(--set checkpoint.uri="file://$TMP/ck-$w-$mode" --set checkpoint.intervalSteps=4
          --set training.sharding=$mode)
      VITJOB_TEST_INJECT_OVERFLOW=$inject run_world "$w" "$TMP/a-$w-$mode" "${ARGS[@]}" "${CK[@]}" \
        --set training.exportPath="$TMP/a-$w-$mode.st"
      for r in $(seq 0 $((w - 1))); do   # every rank skipped both, and said so
        grep -q "event=step_skipped rank=$r step=3 reason=non_finite_gradients loss_scale=65536 next_loss_scale=32768 skipped_steps=1" "$TMP/a-$w-$mode/rank-$r.log"
        grep -q "event=step_skipped rank=$r step=6 reason=non_finite_gradients loss_scale=32768 next_loss_scale=16384 skipped_steps=2" "$TMP/a-$w-$mode/rank-$r.log"
        [ "$(grep -c 'event=step_skipped' "$TMP/a-$w-$mode/rank-$r.log")" -eq 2 ]
      done
      grep -q '"step":3,.*"grad_norm":null,"loss_scale":32768,"skipped_steps":1,"skipped":true}' "$TMP/a-$w-$mode/metrics.jsonl"
      grep -q '"step":8,.*"loss_scale":16384,"skipped_steps":2}' "$TMP/a-$w-$mode/metrics.jsonl"
      grep -q '"skipped_steps":2,' "$TMP/a-$w-$mode/rank-0.out"   # the summary
      python3 -c "
import json, sys
m = json.load(open('$TMP/ck-$w-$mode/step-000000004/manifest.json'))
sys.exit(0 if m['lossScaler'] == {'scale': 32768, 'growthTracker': 1, 'skippedSteps': 1} else 1)"
      if [ "$w" -eq 2 ]; then
        echo "world 2, sharding $mode, against one process:"
        compare "$TMP/a-1-none/metrics.jsonl" "$TMP/a-$w-$mode/metrics.jsonl" 1e-2
      fi
      rm -r "$TMP/ck-$w-$mode/step-000000008"   # as if it died after step 4's checkpoint
      VITJOB_TEST_INJECT_OVERFLOW=$inject run_world "$w" "$TMP/b-$w-$mode" "${ARGS[@]}" "${CK[@]}" \
        --set training.exportPath="$TMP/b-$w-$mode.st"
      grep -q "event=resumed step=4 from_world_size=$w from_sharding=$mode" "$TMP/b-$w-$mode/rank-0.log"
      echo "world $w, sharding $mode: steps 5-8 (loss scale and skips included) and the weights identical"
      cmp <(grep '"loss"' "$TMP/a-$w-$mode/metrics.jsonl" | sed -n '5,$p') <(grep '"loss"' "$TMP/b-$w-$mode/metrics.jsonl")
      cmp "$TMP/a-$w-$mode.st" "$TMP/b-$w-$mode.st"
    done
  done
}
