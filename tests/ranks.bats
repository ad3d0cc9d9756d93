#!/usr/bin/env bats
# tests/ranks.bats - many ranks end to end (worker/gang/rdzv_*.c, worker/gang/comm*.c,
# the sharded step of worker/train/train.c): processes on loopback meet at rank
# 0's store, train together with each sharding mode, match the
# single-process run, and fail cleanly and retryably when a peer is lost,
# late, or of an older generation.
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
  # fmnist_tiny has 205066 parameters: 3 and 4 ranks need padding
  recipe_args --set training.steps=20
}


@test "2, 3 and 4 ranks with sharding none, grad-op and full follow the one-process loss over 20 steps" {
  run_world 1 "$TMP/w1" "${ARGS[@]}" --set training.exportPath="$TMP/w1.safetensors"
  for mode in none grad-op full; do
    for w in 2 3 4; do
      [ "$w" -eq 3 ] && [ "$mode" = none ] && continue
      run_world "$w" "$TMP/$mode-$w" "${ARGS[@]}" --set training.sharding="$mode" \
        --set training.exportPath="$TMP/$mode-$w.safetensors"
      echo "world $w, sharding $mode:"
      compare "$TMP/w1/metrics.jsonl" "$TMP/$mode-$w/metrics.jsonl" 1e-5
      weights "$TMP/w1.safetensors" "$TMP/$mode-$w.safetensors" 2e-4
    done
  done
}

@test "repeated runs with the same world size are bit-identical" {
  for mode in grad-op full; do
    for i in 1 2; do
      run_world 3 "$TMP/$mode$i" "${ARGS[@]}" --set training.steps=8 --set training.sharding=$mode \
        --set training.exportPath="$TMP/$mode$i.safetensors"
    done
    cmp <(grep '"loss"' "$TMP/${mode}1/metrics.jsonl") <(grep '"loss"' "$TMP/${mode}2/metrics.jsonl")
    cmp "$TMP/${mode}1.safetensors" "$TMP/${mode}2.safetensors"
  done
}

@test "sharding full with activation checkpointing and gradient accumulation follows one process" {
  ck=(--set training.activationCheckpointing=true --set training.steps=6 --set training.evalInterval=3)
  run_world 1 "$TMP/c1" "${ARGS[@]}" "${ck[@]}"
  run_world 2 "$TMP/c2" "${ARGS[@]}" "${ck[@]}" --set training.sharding=full
  compare "$TMP/c1/metrics.jsonl" "$TMP/c2/metrics.jsonl" 1e-5
  # the evaluation is split over the ranks and summed: the same accuracy
  diff <(grep test_accuracy "$TMP/c1/metrics.jsonl" | sed 's/,"train_seconds.*//') \
       <(grep test_accuracy "$TMP/c2/metrics.jsonl" | sed 's/,"train_seconds.*//')
}

@test "under full each rank holds at most 1.05/N of the one-process state plus one block" {
  run_world 1 "$TMP/s1" "${ARGS[@]}" --set training.steps=2
  for w in 2 4; do
    run_world "$w" "$TMP/s$w" "${ARGS[@]}" --set training.steps=2 --set training.sharding=full
  done
  python3 - "$TMP" <<'PY'
import re, sys
def figures(path):
    line = [l for l in open(path) if "event=shard" in l][0]
    f = dict(re.findall(r"(\w+)=(\d+)", line))
    return {k: int(f[k]) for k in ("param_bytes", "grad_bytes", "optim_bytes", "params")}
one = figures(sys.argv[1] + "/s1/rank-0.log")
single = one["param_bytes"] + one["grad_bytes"] + one["optim_bytes"]
# fmnist_tiny (dim 64, mlp 256): a block is 12*64*64 + 13*64 parameters;
# one block's parameters, gradients and AdamW state: 16 bytes each
block = 16 * (12 * 64 * 64 + 13 * 64)
ok = True
print("one process: params+grads+optimizer %d bytes; one block %d bytes" % (single, block))
for w in (2, 4):
    for r in range(w):
        f = figures("%s/s%d/rank-%d.log" % (sys.argv[1], w, r))
        mine = f["param_bytes"] + f["grad_bytes"] + f["optim_bytes"]
        bound = 1.05 * single / w + block
        print("world %d rank %d: %d bytes (param %d, grad %d, optimizer %d) = %.3f/N of one "
              "process; bound %d" % (w, r, mine, f["param_bytes"], f["grad_bytes"],
              f["optim_bytes"], mine * w / single, bound))
        ok = ok and mine <= bound
sys.exit(0 if ok else 1)
PY
}

@test "bf16-mixed on 2 ranks follows the one-process bf16 loss" {
  bf=(--set training.precision=bf16-mixed --set training.steps=10)
  run_world 1 "$TMP/b1" "${ARGS[@]}" "${bf[@]}"
  for mode in none grad-op full; do
    run_world 2 "$TMP/b2$mode" "${ARGS[@]}" "${bf[@]}" --set training.sharding=$mode
    echo "bf16-mixed, world 2, sharding $mode:"
    compare "$TMP/b1/metrics.jsonl" "$TMP/b2$mode/metrics.jsonl" 1e-2
  done
}

@test "under grad-op each rank holds 1/N of the optimizer state, padded, and says so" {
  run_world 4 "$TMP/m" "${ARGS[@]}" --set training.steps=2 --set training.sharding=grad-op
  for r in 0 1 2 3; do
    grep -o 'event=shard.*' "$TMP/m/rank-$r.log"
    grep -q "rank=$r world=4 sharding=grad-op params=205066 padded=205068 " "$TMP/m/rank-$r.log"
  done
  # slices of 51267; the last one's 2 padding values have no optimizer state
  for r in 0 1 2; do grep -q "shard_params=51267 .*optim_bytes=410136" "$TMP/m/rank-$r.log"; done
  grep -q "shard_params=51265 .*optim_bytes=410120" "$TMP/m/rank-3.log"   # 2 x 4 x 51265
  ! grep -q "step=" "$TMP/m/rank-1.log"   # progress only on rank 0
}

@test "a rank killed mid-run makes the others exit retryably, naming the lost peer" {
  for mode in none full; do
    kill_one "$mode"
  done
}

# kill_one MODE: 3 ranks train; rank 2 gets SIGKILL once rank 0 made progress
kill_one() {
  rm -rf "$TMP/k"
  mkdir -p "$TMP/k"
  port=$(free_port)
  long=(--set training.steps=100000 --set training.collectiveTimeoutSeconds=10
        --set training.logInterval=1 --set training.sharding="$1")
  for r in 0 1 2; do start_rank 3 $r "$port" 0 "$TMP/k" "${ARGS[@]}" "${long[@]}"; done
  for _ in $(seq 1 600); do grep -q "step=" "$TMP/k/rank-0.log" 2>/dev/null && break; sleep 0.1; done
  pid=$(test_pids VITJOB_RANK=2 | head -1)
  [ -n "$pid" ]
  kill -KILL "$pid"
  wait_ranks
  for r in 0 1; do
    echo "sharding $1, rank $r: $(cat "$TMP/k/rank-$r.rc") $(tail -1 "$TMP/k/rank-$r.log")"
    [ "$(cat "$TMP/k/rank-$r.rc")" -eq 1 ]
    grep -q "class=peer_lost retried=yes.*; lost: rank 2\"" "$TMP/k/rank-$r.log"
  done
}

@test "a rank of an older generation is refused at rendezvous and the new one times out naming it" {
  # rank 0's timeout is the outcome (the test lasts that long): it must
  # outlast rank 1's start and refusal, so rank 1 starts once rank 0's store
  # listens (rank 0 joined it) and rank 0 then waits 10 s; rank 1's own 30 s
  # are never reached (the refusal is the store's answer)
  mkdir -p "$TMP/g"
  port=$(free_port)
  start_rank 2 0 "$port" 3 "$TMP/g" "${ARGS[@]}" --set training.rendezvousTimeoutSeconds=10
  rank0_logged "$TMP/g" "event=joined rank=0 " "join (its store listening)"
  start_rank 2 1 "$port" 2 "$TMP/g" "${ARGS[@]}" --set training.rendezvousTimeoutSeconds=30
  wait_ranks
  cat "$TMP/g/rank-1.log" | tail -1
  [ "$(cat "$TMP/g/rank-1.rc")" -eq 1 ]
  grep -q "class=rendezvous" "$TMP/g/rank-1.log"
  grep -qi "generation" "$TMP/g/rank-1.log"
  [ "$(cat "$TMP/g/rank-0.rc")" -eq 1 ]
  grep -q "rank.* 1 .*never arrived\|ranks\? 1\b" "$TMP/g/rank-0.log"
}

@test "rank 0 unreachable: the others exit retryably after the rendezvous timeout" {
  mkdir -p "$TMP/u"
  start_rank 2 1 "$(free_port)" 0 "$TMP/u" "${ARGS[@]}" --set training.rendezvousTimeoutSeconds=2
  wait_ranks
  tail -1 "$TMP/u/rank-1.log"
  [ "$(cat "$TMP/u/rank-1.rc")" -eq 1 ]
  grep -q "class=rendezvous retried=yes" "$TMP/u/rank-1.log"
}

@test "SIGTERM while waiting at the rendezvous (for a peer, or for rank 0's store) stops the rank at once with 143" {
  # a pod deleted while its gang cannot meet (the next generation's peer
  # unschedulable) must go within its grace period, not at the rendezvous
  # timeout; RANK_TIMEOUT makes a rank that ignores SIGTERM fail in a minute
  mkdir -p "$TMP/j" "$TMP/c"
  port=$(free_port)
  long=(--set training.rendezvousTimeoutSeconds=3600)
  RANK_TIMEOUT=60 start_rank 2 0 "$port" 0 "$TMP/j" "${ARGS[@]}" "${long[@]}"     # waits for rank 1
  RANK_TIMEOUT=60 start_rank 2 1 "$(free_port)" 0 "$TMP/c" "${ARGS[@]}" "${long[@]}"  # no store there
  for d in j c; do
    for _ in $(seq 1 600); do grep -q "event=config" "$TMP/$d/rank-"*.log 2>/dev/null && break; sleep 0.1; done
  done
  for p in $(test_pids); do kill -TERM "$p"; done
  wait_ranks
  tail -n 1 "$TMP/j/rank-0.log" "$TMP/c/rank-1.log"
  [ "$(cat "$TMP/j/rank-0.rc")" -eq 143 ]
  [ "$(cat "$TMP/c/rank-1.rc")" -eq 143 ]
  grep -q "class=stopped.*stopped by signal while" "$TMP/j/rank-0.log"
  grep -q "class=stopped.*stopped by signal while" "$TMP/c/rank-1.log"
}

@test "a rank outside the world, a missing endpoint or an unsupported combination is exit 2" {
  run env VITJOB_REPLICAS=2 VITJOB_RANK=2 VITJOB_RDZV_ENDPOINT=127.0.0.1:1 "$WORKER" train "${ARGS[@]}"
  [ "$status" -eq 2 ]
  [[ "$output" == *"VITJOB_RANK=2 is not below VITJOB_REPLICAS=2"* ]]
  run env VITJOB_REPLICAS=2 VITJOB_RANK=0 "$WORKER" train "${ARGS[@]}"
  [ "$status" -eq 2 ]
  [[ "$output" == *"needs VITJOB_RDZV_ENDPOINT"* ]]
  run env VITJOB_REPLICAS=2 VITJOB_RANK=-1 "$WORKER" train "${ARGS[@]}"
  [ "$status" -eq 2 ]
  run env VITJOB_REPLICAS=2 VITJOB_RANK=0 VITJOB_RDZV_ENDPOINT=127.0.0.1:1 "$WORKER" train \
    "${ARGS[@]}" --set training.device=cuda
  # GPU ranks run through NCCL; without a usable GPU the backend fails first,
  # before any rendezvous (rank 0's store at port 1 is never tried)
  [ "$status" -eq 2 ]
  [[ "$output" == *"class=no_device"* ]]
  [[ "$output" != *"comp=rdzv"* ]]
}

# start_pod LOCAL PORT OUTDIR [worker args...]: one pod of LOCAL local ranks
# (the local agent and its children), world = LOCAL; log in OUTDIR/pod.log,
# exit status in OUTDIR/pod.rc
start_pod() {
  local n=$1 port=$2 out=$3
  shift 3
  mkdir -p "$out"
  ( rc=0
    timeout -k 10 "$RANK_TIMEOUT" env VITJOB_TEST_TMP="$TMP" \
      VITJOB_REPLICAS=1 VITJOB_LOCAL_RANKS="$n" VITJOB_RANK=0 VITJOB_RESTART=0 \
      VITJOB_RDZV_ENDPOINT="127.0.0.1:$port" VITJOB_COMM_HOST=127.0.0.1 \
      "$WORKER" train "$@" --log-level info > "$out/pod.out" 2> "$out/pod.log" || rc=$?
    echo "$rc" > "$out/pod.rc" ) &
  RANK_PIDS+=($!)
}

# pid_of_local K: the process of local rank K
pid_of_local() {
  test_pids "VITJOB_LOCAL_RANK=$1" | head -1
}

@test "one pod of 2 local ranks trains like 2 pods and like one process" {
  run_world 1 "$TMP/l1" "${ARGS[@]}" --set training.steps=6
  start_pod 2 "$(free_port)" "$TMP/l2" "${ARGS[@]}" --set training.steps=6 --set training.sharding=grad-op \
    --metrics "$TMP/l2/metrics.jsonl"
  wait_ranks
  [ "$(cat "$TMP/l2/pod.rc")" -eq 0 ] || { tail -5 "$TMP/l2/pod.log"; false; }
  grep -q "event=started local_rank=1 global_rank=1" "$TMP/l2/pod.log"
  grep -q "event=shard rank=1 world=2 sharding=grad-op" "$TMP/l2/pod.log"
  compare "$TMP/l1/metrics.jsonl" "$TMP/l2/metrics.jsonl" 1e-5
}

@test "a local rank killed: the agent stops the others and the pod exits retryably, naming it" {
  port=$(free_port)
  start_pod 3 "$port" "$TMP/lk" "${ARGS[@]}" --set training.steps=100000 --set training.logInterval=1
  for _ in $(seq 1 600); do grep -q "step=" "$TMP/lk/pod.log" 2>/dev/null && break; sleep 0.1; done
  pid=$(pid_of_local 2)
  [ -n "$pid" ]
  kill -KILL "$pid"
  wait_ranks
  tail -1 "$TMP/lk/pod.log"
  [ "$(cat "$TMP/lk/pod.rc")" -eq 1 ]
  grep -q 'class=peer_lost retried=yes msg="local rank 2 (global rank 2) was killed by signal 9; the pod'"'"'s other local ranks were stopped"' "$TMP/lk/pod.log"
  [ -z "$(pid_of_local 0)" ] && [ -z "$(pid_of_local 1)" ]
}

@test "SIGTERM to the pod's agent stops every local rank and the pod exits 143" {
  port=$(free_port)
  start_pod 2 "$port" "$TMP/lt" "${ARGS[@]}" --set training.steps=100000 --set training.logInterval=1
  for _ in $(seq 1 600); do grep -q "step=" "$TMP/lt/pod.log" 2>/dev/null && break; sleep 0.1; done
  agent=$(test_pids | while read -r p; do
            tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -q '^VITJOB_LOCAL_RANK=' || echo "$p"; done | head -1)
  [ -n "$agent" ]
  kill -TERM "$agent"
  wait_ranks
  tail -2 "$TMP/lt/pod.log"
  [ "$(cat "$TMP/lt/pod.rc")" -eq 143 ]
  [ "$(grep -c 'how="exited 143"' "$TMP/lt/pod.log")" -eq 2 ]
}

@test "a local rank outside VITJOB_LOCAL_RANKS is exit 2" {
  run env VITJOB_LOCAL_RANKS=2 VITJOB_LOCAL_RANK=2 VITJOB_RDZV_ENDPOINT=127.0.0.1:1 "$WORKER" train "${ARGS[@]}"
  [ "$status" -eq 2 ]
  [[ "$output" == *"VITJOB_LOCAL_RANK=2 is not below VITJOB_LOCAL_RANKS=2"* ]]
}
