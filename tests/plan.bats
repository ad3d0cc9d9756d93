#!/usr/bin/env bats
# tests/plan.bats - `vitjob-worker plan` (worker/plan/: jobplan.c,
# plan_cmd.c and the rest): its per-rank memory against the backend's measured peak of
# its own allocations in real worker runs (ranks on loopback, as
# tests/ranks.bats runs them; each rank logs event=memory peak_bytes=...
# at its end), its JSON and table, its refusals. The full product of
# models x sharding modes x world sizes x checkpointing is held to the
# same plan in tests/test_jobplan.c (the allocations, without training);
# here the runs train 2 steps and evaluate, with every mode and world size
# and both checkpointing settings for fmnist_tiny, and a cross-section of
# them for fmnist_small and vit_s16 (at 28x28x1), so that the file stays
# near a minute. The time model is checked by `make bench`
# (bench/plan_bench.py), not here: on a shared 2-core machine the rate is
# too noisy for a test that can fail.
#
# BUILD (default build) points at the build tree; WORKER may override.

: "${BATS_TEST_TIMEOUT:=300}"

load ranks_helpers

setup_file() {
  # a small Fashion-MNIST (random pixels): 64 training and 16 test images
  export PLAN_DATA="$BATS_FILE_TMPDIR/fmnist"
  mkdir -p "$PLAN_DATA"
  python3 - "$PLAN_DATA" <<'PY'
import gzip, random, struct, sys
random.seed(7)
for split, n in (("train", 64), ("t10k", 16)):
    with gzip.open("%s/%s-images-idx3-ubyte.gz" % (sys.argv[1], split), "wb", 1) as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28) + bytes(random.randrange(256) for _ in range(n * 784)))
    with gzip.open("%s/%s-labels-idx1-ubyte.gz" % (sys.argv[1], split), "wb", 1) as f:
        f.write(struct.pack(">II", 2049, n) + bytes(random.randrange(10) for _ in range(n)))
PY
}

setup() {
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  TMP=$(mktemp -d)
  BASE=(--set data.uri="$PLAN_DATA" --set training.steps=2 --set training.optimizer.warmupSteps=1
        --set training.globalBatchSize=8 --set training.microBatchSize=2
        --set training.threads=1 --set training.exportPath=
        --set training.rendezvousTimeoutSeconds=60 --set training.collectiveTimeoutSeconds=60)
}

model_args() {
  case $1 in
    vit_s16) echo --set model.preset=vit_s16 --set model.imageSize=28 --set model.patchSize=7 \
                  --set model.channels=1 --set model.numClasses=10 ;;
    *) echo --set model.preset="$1" ;;
  esac
}

# check MODEL WORLD MODE CKPT: a real run of WORLD ranks against the plan:
# every rank's peak within 5% above or below the plan (rank 0's, the
# largest: a grad-op rank past the end holds less), rank 0's within 5%,
# and the plan the run logged is the command's (one function)
check() {
  local model=$1 w=$2 mode=$3 ck=$4 out="$TMP/$1-$2-$3-$4"
  local args=("${BASE[@]}" $(model_args "$model") --set training.sharding="$mode"
              --set training.activationCheckpointing="$ck")
  "$WORKER" plan "${args[@]}" --replicas "$w" --json > "$out.json"
  run_world "$w" "$out" "${args[@]}"
  python3 - "$out" "$w" "$model $mode world=$w ckpt=$ck" <<'PY'
import json, re, sys
out, w, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
plan = json.load(open(out + ".json"))["memoryPerRank"]["backend"]
for r in range(w):
    log = open("%s/rank-%d.log" % (out, r)).read()
    m = re.search(r"event=memory rank=%d peak_bytes=(\d+) planned_bytes=(\d+)" % r, log)
    assert m, "rank %d logged no event=memory" % r
    peak, logged = int(m.group(1)), int(m.group(2))
    rel = (peak - plan) / plan
    print("%-36s rank %d: plan %10d  peak %10d  (%+.3f%%)" % (what, r, plan, peak, 100 * rel))
    assert peak <= plan * 1.05, "rank %d peaks above the plan" % r
    if r == 0:
        assert abs(rel) < 0.05, "rank 0 is %.2f%% off the plan" % (100 * rel)
        assert logged == plan, "the run planned %d, the command %d" % (logged, plan)
PY
}

# the table of plan against peak, in the test log (bats shows fd 3)
table() {
  set -o pipefail
  check "$@" | tee /dev/fd/3
}

@test "fmnist_tiny: every rank's peak memory is within 5% of the plan in every sharding mode at 1, 2 and 4 ranks, with and without checkpointing" {
  for ck in false true; do table fmnist_tiny 1 none $ck; done
  for w in 2 4; do
    for mode in none grad-op full; do
      for ck in false true; do table fmnist_tiny $w $mode $ck; done
    done
  done
}

@test "fmnist_small and vit_s16: a peak within 5% of the plan across modes, world sizes and checkpointing" {
  table fmnist_small 1 none true
  table fmnist_small 2 full false
  table fmnist_small 4 grad-op true
  table vit_s16 1 none false
  table vit_s16 2 grad-op true
  table vit_s16 4 full false
}

@test "plan --json has the stable keys and a table says fits or does not fit" {
  run "$WORKER" plan "${BASE[@]}" --replicas 2 --json
  [ "$status" -eq 0 ]
  echo "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
for k in ("params", "sharding", "world", "fits", "memoryPerRank", "time", "changes", "suggestion"):
    assert k in d, k
for k in ("parameters", "gradients", "optimizerState", "gatheredUnits", "activations",
          "activationsCheckpointed", "activationsNotCheckpointed", "workspace",
          "collectiveBuffers", "backend", "loaderQueue", "total"):
    assert isinstance(d["memoryPerRank"][k], (int, float)), k
assert d["world"] == 2 and d["fits"] is True
'
  run "$WORKER" plan "${BASE[@]}" --set model.preset=vit_h14 --set data.format=webdataset \
    --set 'data.uri=s3://b/train-{0000..0009}.tar' --set training.globalBatchSize=8192 \
    --set training.microBatchSize=128 --replicas 8 --local-ranks 8 --device cuda --gpu-memory 80G
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"does not fit"* ]]
  [[ "$output" == *"suggestion: training.activationCheckpointing=true"* ]]
  run "$WORKER" plan "${BASE[@]}" --set model.preset=vit_h14 --set data.format=webdataset \
    --set 'data.uri=s3://b/train-{0000..0009}.tar' --set training.globalBatchSize=8192 \
    --set training.microBatchSize=128 --set training.activationCheckpointing=true \
    --replicas 8 --local-ranks 8 --device cuda --gpu-memory 80G
  [ "$status" -eq 0 ]
  [[ "$output" == *"  fits"* ]]
}

# table_sums: every "total" line of a plan's table is the sum of the MiB
# lines above it back to the previous total (the activations' two
# what-if lines and the "= backend" subtotal's parts counted once)
table_sums() {
  python3 -c '
import re, sys
lines = sys.stdin.read().split("time per step:")[0].splitlines()
run, n = 0.0, 0
for ln in lines:
    m = re.match(r"  (\S.*?)\s+(-?[0-9.]+) MiB$", ln)
    if not m or ln.startswith("    "):
        continue
    name, v = m.group(1), float(m.group(2))
    if name == "device memory":
        continue
    if name == "= backend":
        assert abs(run - v) <= 0.1 * n + 0.05, (ln, run)
        run, n = v, 1
    elif name.startswith("total"):
        assert abs(run - v) <= 0.1 * n + 0.05, (ln, run)
        print("ok:", ln.strip(), "=", round(run, 1))
        run, n = 0.0, 0
    else:
        run, n = run + v, n + 1
'
}

@test "a plan's table totals are the sums of the lines above them, on the CPU and on a GPU (the host's lines summed apart there)" {
  run "$WORKER" plan "${BASE[@]}"
  [ "$status" -eq 0 ]
  table_sums <<<"$output"
  run "$WORKER" plan "${BASE[@]}" --set model.preset=vit_b16 --set data.format=webdataset \
    --set 'data.uri=/data/train-{0000..0009}.tar' --set training.globalBatchSize=128 \
    --set training.microBatchSize=64 --device cuda --gpu h100
  echo "$output" | sed -n 1,24p
  [ "$status" -eq 0 ]
  run table_sums <<<"$output"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"total (GPU)"* ]] && [[ "$output" == *"total (host)"* ]]
}

@test "plan --config of a ViTJob manifest plans its replicas x gpusPerReplica ranks on GPUs of its gpuMemory; flags still win" {
  cat > "$TMP/job.yaml" <<'YAML'
apiVersion: vitjob.dev/v1alpha1
kind: ViTJob
metadata: {name: big}
spec:
  replicas: 4
  gpusPerReplica: 8
  gpuMemory: 40Gi
  model: {preset: vit_b16}
  data: {format: webdataset, uri: "/data/train-{0000..0009}.tar"}
  training: {globalBatchSize: 1024, microBatchSize: 32}
YAML
  run "$WORKER" plan --config "$TMP/job.yaml" --json
  [ "$status" -eq 0 ]
  python3 -c 'import json, sys; d = json.loads(sys.argv[1]); assert d["world"] == 32, d["world"]' "$output"
  run "$WORKER" plan --config "$TMP/job.yaml"
  [[ "$output" == *"rank 0 of 32"* ]]
  [[ "$output" == *"40960.0 MiB"* ]]
  [[ "$output" == *"total (GPU)"* ]]
  run "$WORKER" plan --config "$TMP/job.yaml" --replicas 2 --local-ranks 4
  [[ "$output" == *"rank 0 of 8,"* ]]
  sed -i 's/gpuMemory: 40Gi/gpuMemory: lots/' "$TMP/job.yaml"
  run "$WORKER" plan --config "$TMP/job.yaml"
  [ "$status" -eq 2 ]
  [[ "$output" == *'spec.gpuMemory='*lots*'a size'* ]]
}

@test "plan --config of an elastic manifest plans each allowed size down to minReplicas and warns when the fewest does not fit" {
  cat > "$TMP/el.yaml" <<'YAML'
apiVersion: vitjob.dev/v1alpha1
kind: ViTJob
metadata: {name: el}
spec:
  replicas: 8
  gpusPerReplica: 1
  gpuMemory: 6Gi
  elastic: {minReplicas: 2, pendingTimeoutSeconds: 60}
  model: {preset: vit_h14}
  data: {format: webdataset, uri: "/data/train-{0000..0009}.tar"}
  training: {globalBatchSize: 1024, microBatchSize: 16, sharding: full, activationCheckpointing: true}
YAML
  run "$WORKER" plan --config "$TMP/el.yaml"
  [ "$status" -eq 0 ]
  [[ "$output" == *"elastic: minReplicas 2 to replicas 8, global batch 1024 kept"* ]]
  [[ "$output" == *"replicas 2 "*"accumulation 32"*"does not fit"* ]]
  [[ "$output" == *"replicas 4 "*"accumulation 16"*"fits"* ]]
  [[ "$output" != *"replicas 3 "* ]]
  [[ "$output" == *"warning: at 2 replicas"*"a shrink below 4 replicas would not fit"* ]]
  run "$WORKER" plan --config "$TMP/el.yaml" --json
  [ "$status" -eq 0 ]
  python3 -c 'import json, sys; e = json.loads(sys.argv[1])["elastic"]; assert [s["replicas"] for s in e["sizes"]] == [2, 4], e; assert e["smallestFittingReplicas"] == 4, e' "$output"
  # the flag wins over the manifest; equal to replicas: no elastic part
  run "$WORKER" plan --config "$TMP/el.yaml" --min-replicas 8 --json
  python3 -c 'import json, sys; assert "elastic" not in json.loads(sys.argv[1])' "$output"
}

@test "plan refuses a bad flag, a bad size and a world size the batch does not divide, with exit code 2" {
  run "$WORKER" plan --bogus
  [ "$status" -eq 2 ]
  run "$WORKER" plan --gpu-memory lots
  [ "$status" -eq 2 ]
  [[ "$output" == *"--gpu-memory lots"* ]]
  run "$WORKER" plan "${BASE[@]}" --replicas 3
  [ "$status" -eq 2 ]
  [[ "$output" == *"globalBatchSize=8"* ]]
}

@test "plan --measure on the CPU gives a measured rate, a loopback bus bandwidth and images per second" {
  run "$WORKER" plan "${BASE[@]}" --replicas 2 --measure --json
  echo "$output"
  [ "$status" -eq 0 ]
  echo "$output" | python3 -c '
import json, sys
t = json.load(sys.stdin)["time"]
assert t["flopsPerSecondPerRank"] > 0 and t["rateSource"].startswith("measured"), t
assert t["busBytesPerSecond"] > 0 and t["busSource"].startswith("measured"), t
assert t["imagesPerSecond"] > 0 and t["collectiveBytesPerRank"] > 0, t
'
}

@test "plan --measure with local ranks times them at once, the optimizer step and the collectives' calls (full's in its own schedule), and the step is its terms' sum" {
  run "$WORKER" plan "${BASE[@]}" --local-ranks 4 --set training.sharding=full --measure --json
  echo "$output"
  [ "$status" -eq 0 ]
  echo "$output" | python3 -c '
import json, sys
t = json.load(sys.stdin)["time"]
assert "4 of 4 local ranks at once" in t["rateSource"], t["rateSource"]
assert t["optimizerSource"].startswith("measured") and t["optimizerSecondsPerParam"] > 0, t
assert t["optimizerSeconds"] > 0 and t["optimizerParamsPerRank"] > 0, t
assert t["busSource"].endswith("4 ranks") and t["callSource"].startswith("measured"), t
assert t["callSource"].startswith("measured: the strategy"), t["callSource"]  # full: its own schedule
assert t["collectiveSecondsPerCall"] > 0 and t["collectiveCalls"] > 0, t
assert t["collectiveLatencySeconds"] > 0, t
terms = t["computeSeconds"] + t["optimizerSeconds"] + t["collectiveBandwidthSeconds"] + t["collectiveLatencySeconds"]
assert abs(t["stepSeconds"] - terms) <= 1e-9 * terms, (t["stepSeconds"], terms)
'
  run "$WORKER" plan "${BASE[@]}" --local-ranks 2 --measure
  [ "$status" -eq 0 ]
  [[ "$output" == *"optimizer step"* ]]
  [[ "$output" == *"the calls' latency"* ]]
}
