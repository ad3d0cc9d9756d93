#!/usr/bin/env bats
# tests/data.bats - training on webdataset shards end to end (worker/data/
# loader.c through worker/train/feed.c and train.c), on file:// (DATA_BACKEND
# =file, the default) or on S3 (DATA_BACKEND=s3: moto's server on loopback,
# tests/s3/moto_server.py): shards written by `vitjob-worker shards` from a
# 600-image Fashion-MNIST subset (6 shards of 100 JPEGs: an epoch is 12
# steps, so a 40-step run crosses three epoch boundaries); a kill -9 at
# any moment and the resume give the uninterrupted run's metrics and export
# bit for bit, at 1 and 2 ranks; on S3 dropped connections mid-shard are
# survived with the same result; every bad data set ends with its exit code
# and a message naming the shard.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=600}"

load ranks_helpers
load recipe_helpers

setup_file() {
  export DATA_BACKEND=${DATA_BACKEND:-file}
  export BUILD=${BUILD:-build}
  export WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  export PY=${VITJOB_TEST_PYTHON:-python3}
  local d="$BATS_FILE_TMPDIR"
  # the subset: the first 600 training and 200 test images, as IDX files
  fmnist_subset "$d/idx" 600 200
  if [ "$DATA_BACKEND" = s3 ]; then
    moto_start "$d" vitjob-data
    [ -z "${S3_SKIP:-}" ] || return 0
    export ROOT=s3://vitjob-data/fm
  else
    export ROOT=file://$d/shards
  fi
  local ep=()
  [ "$DATA_BACKEND" = s3 ] && ep=(--endpoint "$S3_ENDPOINT")
  "$WORKER" shards --from "$d/idx" --out "$ROOT/train-%02d.tar" --samples-per-shard 100 "${ep[@]}" > "$d/w1"
  "$WORKER" shards --from "$d/idx" --split t10k --out "$ROOT/test-%02d.tar" --samples-per-shard 100 "${ep[@]}" > "$d/w2"
}

teardown_file() {
  moto_stop "$BATS_FILE_TMPDIR"
}

setup() {
  [ -z "${S3_SKIP:-}" ] || skip "$S3_SKIP"
  TMP=$(mktemp -d)
  DATA=(--set data.format=webdataset --set "data.uri=$ROOT/train-{00..05}.tar"
        --set "data.testUri=$ROOT/test-{00..01}.tar" --set "data.mean=[0.286]"
        --set "data.std=[0.353]" --set data.cropPct=1 --set data.augment=true
        --set data.shuffleBuffer=30 --set data.workers=1)
  [ "$DATA_BACKEND" = s3 ] && DATA+=(--set data.endpoint="$S3_ENDPOINT")
  ARGS=(--set training.steps=40 --set training.optimizer.warmupSteps=2
        --set training.globalBatchSize=48 --set training.microBatchSize=8
        --set training.threads=1 --set training.rendezvousTimeoutSeconds=60
        --set training.collectiveTimeoutSeconds=60 "${DATA[@]}")
  return 0
}

# kill_and_resume W: W ranks killed with -9 after a checkpoint past step 14,
# then run again: the resume follows the uninterrupted run bit for bit
kill_and_resume() {
  local w=$1
  run_world "$w" "$TMP/ref" "${ARGS[@]}" --set training.exportPath="$TMP/ref.st"
  local ckuri="file://$TMP/ck"
  CK=(--set checkpoint.intervalSteps=1)
  if [ "$DATA_BACKEND" = s3 ]; then   # the checkpoints beside the data
    ckuri="s3://vitjob-data/ck-$(basename "$TMP")"
    CK+=(--set checkpoint.endpoint="$S3_ENDPOINT")
  fi
  CK+=(--set checkpoint.uri="$ckuri")
  mkdir -p "$TMP/k"
  port=$(free_port)
  for r in $(seq 0 $((w - 1))); do
    start_rank "$w" "$r" "$port" 0 "$TMP/k" "${ARGS[@]}" "${CK[@]}" --set training.exportPath=
  done
  for _ in $(seq 1 1200); do grep -q "event=saved step=14" "$TMP/k/rank-0.log" 2>/dev/null && break; sleep 0.05; done
  sleep 0.0$((RANDOM % 10))
  pkill -KILL -f "checkpoint.uri=$ckuri" || true
  wait_ranks
  grep -q "event=saved step=14" "$TMP/k/rank-0.log"
  run_world "$w" "$TMP/r" "${ARGS[@]}" "${CK[@]}" --set training.exportPath="$TMP/r.st"
  from=$(grep -o 'event=resumed step=[0-9]*' "$TMP/r/rank-0.log" | grep -o '[0-9]*$')
  echo "resumed from step $from (epoch $((from / 12)), step $((from % 12)) of it)"
  [ "$from" -ge 14 ]
  ! grep -q "event=loader_position_rederived" "$TMP/r/rank-0.log"
  same_from "$TMP/ref/metrics.jsonl" "$TMP/r/metrics.jsonl" "$from"
  cmp "$TMP/ref.st" "$TMP/r.st"
  a=$(grep -o '"test_accuracy":[0-9.]*' "$TMP/ref/rank-0.out")
  b=$(grep -o '"test_accuracy":[0-9.]*' "$TMP/r/rank-0.out")
  echo "$a / $b"
  [ -n "$a" ] && [ "$a" = "$b" ]
}

@test "the shards written for these tests are what the loader indexes" {
  cat "$BATS_FILE_TMPDIR/w1"
  grep -q "data.uri: .*train-{00..05}.tar" "$BATS_FILE_TMPDIR/w1"
  run_world 1 "$TMP/a" "${ARGS[@]}" --set training.steps=2 --set training.exportPath=
  grep -q "event=indexed key=data.uri .* units=6 samples=600" "$TMP/a/rank-0.log"
  grep -q "event=indexed key=data.testUri .* units=2 samples=200" "$TMP/a/rank-0.log"
  grep -q "steps_per_epoch=12" "$TMP/a/rank-0.log"
  grep -q '"test_accuracy":0\.' "$TMP/a/rank-0.out"
}

@test "kill -9 mid-epoch at 1 rank: the resume gives the uninterrupted run's metrics and export bit for bit" {
  kill_and_resume 1
}

@test "kill -9 mid-epoch at 2 ranks: the resume gives the uninterrupted run's metrics and export bit for bit" {
  kill_and_resume 2
}

# The first 30 GETs (cuts) are cut after 20,000 bytes of their body: each
# read goes on from where the cut left it (a Range from that offset, attempt
# 1 again), far more times in a row than the 5 attempts a request may fail.
# Each cut costs a backoff (0.24 s on average), so more cuts prove no more.
@test "S3: connections dropped mid-shard are survived, with the same training as without faults" {
  [ "$DATA_BACKEND" = s3 ] || skip "S3 only"
  local cuts=30
  run_world 1 "$TMP/ref" "${ARGS[@]}" --set training.steps=14 --set training.exportPath="$TMP/ref.st"
  "$PY" tests/s3/fault_proxy.py --listen-port 0 --target "${S3_ENDPOINT#http://}" \
    --ready-file "$TMP/proxy.port" --cut "$cuts" --cut-bytes 20000 --only-method GET \
    --stats-file "$TMP/proxy.stats" 3>&- &
  for _ in $(seq 1 100); do [ -s "$TMP/proxy.port" ] && break; sleep 0.1; done
  run_world 1 "$TMP/f" "${ARGS[@]}" --set training.steps=14 --set training.exportPath="$TMP/f.st" \
    --set data.endpoint="http://127.0.0.1:$(cat "$TMP/proxy.port")"
  cat "$TMP/proxy.stats"
  grep -q "cuts=$cuts" "$TMP/proxy.stats"
  # all but a few: a cut GET whose body is shorter than 20,000 bytes is not
  # cut short, so it makes no retry (28 of 30 retried, seen)
  [ "$(grep -c "event=s3_retry .*offset=[1-9].* attempt=1 " "$TMP/f/rank-0.log")" -ge $((cuts - 5)) ]
  cmp <(grep '"loss"' "$TMP/ref/metrics.jsonl") <(grep '"loss"' "$TMP/f/metrics.jsonl")
  cmp "$TMP/ref.st" "$TMP/f.st"
}

# bad_data WHAT EXPECTED_RC PATTERN [args]: one rank on a bad data set
bad_data() {
  local rc=$1 pattern=$2
  shift 2
  run "$WORKER" train "${ARGS[@]}" --set training.exportPath= "$@"
  echo "$output" | tail -3
  [ "$status" -eq "$rc" ]
  [[ "$output" == *$pattern* ]]
}

@test "a missing shard is exit 3 before training, naming it" {
  bad_data 3 "train-06.tar" --set "data.uri=$ROOT/train-{00..06}.tar"
  [[ "$output" != *"event=start"* ]]
}

@test "a label at or above model.numClasses is exit 3, naming the shard, the key and the label" {
  bad_data 3 "is not below model.numClasses=5" --set model.numClasses=5
  [[ "$output" == *"train-0"*".tar: sample"* ]]
}

@test "fewer shards than ranks is a config error naming both numbers" {
  port=$(free_port)
  mkdir -p "$TMP/two"
  for r in 0 1; do start_rank 2 $r "$port" 0 "$TMP/two" "${ARGS[@]}" --set "data.uri=$ROOT/train-00.tar"; done
  wait_ranks
  cat "$TMP/two/rank-0.log" | tail -2
  [ "$(cat "$TMP/two/rank-0.rc")" -eq 2 ]
  grep -q "1 shards for 2 ranks" "$TMP/two/rank-0.log"
}

@test "a file that is not a tar, an empty data set, and too many bad images are exit 3 naming the shard" {
  [ "$DATA_BACKEND" = file ] || skip "file:// only (the data are made in place)"
  d=$TMP/bad
  mkdir -p "$d"
  head -c 5000 /dev/urandom > "$d/notar-00.tar"
  bad_data 3 "notar-00.tar" --set "data.uri=file://$d/notar-00.tar" --set "data.testUri="
  /usr/bin/python3 -c 'import tarfile; tarfile.open("'"$d"'/empty-00.tar", "w").close()'
  bad_data 3 "the data set is empty" --set "data.uri=file://$d/empty-00.tar" --set "data.testUri="
  # a shard whose JPEGs are cut short: 40 of 100 bad, far above maxBadFraction
  /usr/bin/python3 - "${ROOT#file://}/train-02.tar" "$d/cut-00.tar" <<'PY'
import io, sys, tarfile
src, dst = sys.argv[1], sys.argv[2]
with tarfile.open(src) as t, tarfile.open(dst, "w", format=tarfile.USTAR_FORMAT) as o:
    n = 0
    for m in t.getmembers():
        data = t.extractfile(m).read()
        if m.name.endswith(".jpg"):
            if n % 5 < 2:
                data = data[: len(data) // 2]
            n += 1
        ti = tarfile.TarInfo(m.name); ti.size = len(data); o.addfile(ti, io.BytesIO(data))
PY
  cp "${ROOT#file://}/train-00.tar" "$d/cut-01.tar"
  bad_data 3 "the worst shard is file://$d/cut-00.tar" --set "data.uri=file://$d/cut-{00..01}.tar" \
    --set "data.testUri=" --set data.maxBadFraction=0.05
  [[ "$output" == *"image file "*"could not be read or decoded"*"data.maxBadFraction=0.05 allows "*": set it to "*" or more to skip such samples"* ]]
  [[ "$output" != *"decode.c:"* ]]
  [[ "$output" == *"event=bad_sample shard=file://$d/cut-00.tar"* ]]
  [ "$(grep -c 'event=bad_sample' <<< "$output")" -eq 1 ]   # once per shard
  # under the limit the bad ones are skipped, counted in the summary
  run "$WORKER" train "${ARGS[@]}" --set training.exportPath= --set training.steps=8 \
    --set "data.uri=file://$d/cut-{00..01}.tar" --set "data.testUri=" --set data.maxBadFraction=0.3
  [ "$status" -eq 0 ]
  [[ "$output" == *'"skipped_samples":'[1-9]* ]]
  [[ "$output" == *'"test_accuracy":null'* ]]
}
