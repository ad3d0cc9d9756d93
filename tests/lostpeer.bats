#!/usr/bin/env bats
# tests/lostpeer.bats - the ranks' heartbeat end to end (worker/gang/heartbeat.c,
# worker/train/lostpeer.c): real worker processes on loopback; a rank killed
# is lost with evidence closed, one frozen (SIGSTOP) with evidence heartbeat
# within the heartbeat timeout while the collective timeout is far away; a
# rank woken after its gang is gone exits peer_lost without a checkpoint;
# with 2 pods of 2 local ranks the lost rank's pod index is named. Every
# wait has a generous deadline; what is asserted is the outcome, not how
# fast it came (the latency is printed).
#
# BUILD (default build) points at the build tree; WORKER may override.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

load ranks_helpers

setup() {
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  TMP=$(mktemp -d)
  # a run that goes on until a test ends it; a collective would wait 600 s
  ARGS=(--set training.steps=100000 --set training.optimizer.warmupSteps=2
        --set training.globalBatchSize=48 --set training.microBatchSize=4
        --set training.threads=1 --set training.exportPath= --set training.logInterval=1
        --set training.rendezvousTimeoutSeconds=60 --set training.collectiveTimeoutSeconds=600
        --set training.heartbeatTimeoutSeconds=3)
}

# until_file FILE SECONDS: waits for FILE (a rank's exit status) at most SECONDS
until_file() {
  local i
  for i in $(seq 1 $(($2 * 10))); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "no $1 after $2 s"; return 1
}

# until_steps LOG: waits (at most 120 s) until LOG shows training steps
until_steps() {
  local i
  for i in $(seq 1 1200); do grep -q "step=" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "no step in $1"; tail -5 "$1"; return 1
}

# latency LOG SINCE: seconds from SINCE (date +%s.%N) to LOG's event=peer_lost line
latency() {
  python3 - "$1" "$2" <<'PY'
import datetime, re, sys
line = [l for l in open(sys.argv[1]) if "event=peer_lost" in l][0]
ts = re.match(r"ts=(\S+)", line).group(1).replace("Z", "+00:00")
t = datetime.datetime.fromisoformat(ts).timestamp()
print("%.2f" % (t - float(sys.argv[2])))
PY
}

# two ranks training; OUT
two_ranks() {
  mkdir -p "$1"
  PORT=$(free_port)
  RANK_PIDS=()
  for r in 0 1; do start_rank 2 $r "$PORT" 0 "$1" "${ARGS[@]}" "${@:2}"; done
  until_steps "$1/rank-0.log"
}

@test "a rank killed: the survivor exits peer_lost naming it with evidence closed" {
  two_ranks "$TMP/k"
  since=$(date +%s.%N)
  kill -KILL "$(test_pids VITJOB_RANK=1 | head -1)"
  until_file "$TMP/k/rank-0.rc" 60
  wait_ranks
  echo "rank 0: $(tail -1 "$TMP/k/rank-0.log")"
  echo "noticed after $(latency "$TMP/k/rank-0.log" "$since") s"
  [ "$(cat "$TMP/k/rank-0.rc")" -eq 1 ]
  grep -q "comp=worker event=peer_lost rank=1 pod=1 evidence=closed noticed_by=0" "$TMP/k/rank-0.log"
  tail -1 "$TMP/k/rank-0.log" | grep -q 'exit_code=1 class=peer_lost retried=yes msg=.*; lost: rank 1"$'
}

@test "a rank frozen: the survivor exits peer_lost with evidence heartbeat, not after the collective timeout" {
  two_ranks "$TMP/f"
  frozen=$(test_pids VITJOB_RANK=1 | head -1)
  since=$(date +%s.%N)
  kill -STOP "$frozen"
  # the collective would wait 600 s; the heartbeat's 3 s decide
  until_file "$TMP/f/rank-0.rc" 60
  kill -KILL "$frozen"
  wait_ranks
  echo "rank 0: $(tail -1 "$TMP/f/rank-0.log")"
  echo "noticed after $(latency "$TMP/f/rank-0.log" "$since") s (timeout 3 s)"
  [ "$(cat "$TMP/f/rank-0.rc")" -eq 1 ]
  grep -q "comp=worker event=peer_lost rank=1 pod=1 evidence=heartbeat noticed_by=0" "$TMP/f/rank-0.log"
  tail -1 "$TMP/f/rank-0.log" | grep -q 'class=peer_lost retried=yes msg="rank 1 (pod index 1) lost: no heartbeat for'
  ! grep -v "event=config" "$TMP/f/rank-0.log" | grep -qi "collective"   # no collective timed out
}

@test "rank 0 frozen, then woken after rank 1 left: it exits peer_lost as stale and writes no checkpoint" {
  two_ranks "$TMP/s" --set checkpoint.uri="file://$TMP/ck" --set checkpoint.intervalSteps=2
  for _ in $(seq 1 1200); do [ -n "$(ls "$TMP/ck" 2>/dev/null)" ] && break; sleep 0.1; done
  frozen=$(test_pids VITJOB_RANK=0 | head -1)
  kill -STOP "$frozen"
  until_file "$TMP/s/rank-1.rc" 60
  [ "$(cat "$TMP/s/rank-1.rc")" -eq 1 ]
  grep -q "comp=worker event=peer_lost rank=0 pod=0 evidence=heartbeat noticed_by=1" "$TMP/s/rank-1.log"
  tail -1 "$TMP/s/rank-1.log" | grep -q '; lost: rank 0 (the rendezvous store'"'"'s)"$'
  sleep 1
  # what a reader can see: a rank frozen inside a shard's upload may leave
  # that upload's temporary (never renamed; removed by the next run's check,
  # as for any writer killed mid-write), never a file of the checkpoint
  before=$(cd "$TMP/ck" && find . -type f ! -name '.vitjob-tmp.*' | sort | xargs md5sum)
  [ -n "$before" ]
  kill -CONT "$frozen"
  until_file "$TMP/s/rank-0.rc" 60
  wait_ranks
  after=$(cd "$TMP/ck" && find . -type f ! -name '.vitjob-tmp.*' | sort | xargs md5sum)
  echo "rank 0: $(tail -1 "$TMP/s/rank-0.log")"
  [ "$(cat "$TMP/s/rank-0.rc")" -eq 1 ]
  grep -q "comp=worker event=stale rank=0 pod=0" "$TMP/s/rank-0.log"
  ! grep -q "event=peer_lost" "$TMP/s/rank-0.log"       # it blames no one
  tail -1 "$TMP/s/rank-0.log" | grep -q 'class=peer_lost retried=yes msg="rank 0 (pod index 0) went unanswered for'
  [ "$before" = "$after" ] || { diff <(echo "$before") <(echo "$after"); false; }
}

@test "2 pods of 2 local ranks: a killed local rank is named with its pod index" {
  port=$(free_port)
  RANK_PIDS=()
  for pod in 0 1; do
    mkdir -p "$TMP/p$pod"
    ( rc=0
      timeout -k 10 "$RANK_TIMEOUT" env VITJOB_TEST_TMP="$TMP" \
        VITJOB_REPLICAS=2 VITJOB_LOCAL_RANKS=2 VITJOB_RANK=$pod VITJOB_RESTART=0 \
        VITJOB_RDZV_ENDPOINT="127.0.0.1:$port" VITJOB_COMM_HOST=127.0.0.1 \
        "$WORKER" train "${ARGS[@]}" --log-level info > "$TMP/p$pod/pod.out" 2> "$TMP/p$pod/pod.log" || rc=$?
      echo "$rc" > "$TMP/p$pod/pod.rc" ) &
    RANK_PIDS+=($!)
  done
  until_steps "$TMP/p0/pod.log"
  victim=$(test_pids VITJOB_RANK=1 | while read -r p; do
             tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx VITJOB_LOCAL_RANK=1 && echo "$p"; done | head -1)
  [ -n "$victim" ]
  kill -KILL "$victim"
  until_file "$TMP/p0/pod.rc" 60
  until_file "$TMP/p1/pod.rc" 60
  wait_ranks
  echo "pod 0: $(tail -1 "$TMP/p0/pod.log")"
  [ "$(cat "$TMP/p0/pod.rc")" -eq 1 ]
  # global rank 3 = pod 1's local rank 1, noticed by rank 0 (pod 0)
  grep -q "comp=worker event=peer_lost rank=3 pod=1 evidence=closed noticed_by=0" "$TMP/p0/pod.log"
}
