# tests/ranks_helpers.bash - loaded by the bats files that run many ranks
# on loopback (ranks, ckpt, ema, regularization, freeze, fp16, data, mixup,
# finetune): start ranks, run a world, compare metrics and exported
# weights; start moto's S3 server, and name the checkpoints of the suites
# run on either checkpoint backend (ckpt, fence). Needs WORKER and TMP (the
# files' setup).

# Every worker a test starts carries VITJOB_TEST_TMP=$TMP (its local ranks
# inherit it), so that a test finds and kills only its own processes, never
# those of another run on the same machine; and runs under timeout(1), so that
# a hung rank fails its test in minutes (RANK_TIMEOUT seconds, default 600).
RANK_TIMEOUT=${RANK_TIMEOUT:-600}

# test_pids [VAR=value]: this test's worker processes (with that variable
# in their environment, when given)
test_pids() {
  local p
  for p in $(pgrep -f "$WORKER train" || true); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "VITJOB_TEST_TMP=$TMP" || continue
    [ -z "${1:-}" ] || tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "$1" || continue
    echo "$p"
  done
}

# teardown of those files: kills what a failed test left running, unmounts
# a test's small file system, and removes TMP; with VITJOB_TEST_KEEP=DIR, a
# failed test's TMP (its ranks' logs) is kept as DIR/<file>-<test number>-<pid>
teardown() {
  for p in $(test_pids); do kill -KILL "$p" 2>/dev/null; done
  umount "$TMP/small" 2>/dev/null || true
  if [ -n "${VITJOB_TEST_KEEP:-}" ] && [ -z "${BATS_TEST_COMPLETED:-}" ]; then
    mkdir -p "$VITJOB_TEST_KEEP" &&
      cp -a "$TMP" "$VITJOB_TEST_KEEP/$(basename "$BATS_TEST_FILENAME" .bats)-$BATS_TEST_NUMBER-$$"
    [ ! -f "$BATS_FILE_TMPDIR/moto.log" ] || cp "$BATS_FILE_TMPDIR/moto.log" \
      "$VITJOB_TEST_KEEP/$(basename "$BATS_TEST_FILENAME" .bats)-$BATS_TEST_NUMBER-$$/"
  fi
  rm -rf "$TMP"
}

# a loopback port free now, drawn below the ephemeral range (32768-60999), so
# that no connection's kernel-picked port takes it before rank 0 binds it;
# from VITJOB_TEST_PORTS (LO-HI, default 20000-31999) as tests/rank_fixture.h
free_port() {
  python3 -c '
import os, random, socket
lo, hi = (int(x) for x in os.environ.get("VITJOB_TEST_PORTS", "20000-31999").split("-"))
for _ in range(200):
    p = random.randrange(lo, hi + 1)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()
'
}

# start_rank W RANK PORT GEN OUTDIR [worker args...]: one rank in the background,
# its log in OUTDIR/rank-RANK.log, its exit status in OUTDIR/rank-RANK.rc
start_rank() {
  local w=$1 rank=$2 port=$3 gen=$4 out=$5
  shift 5
  ( rc=0
    timeout -k 10 "$RANK_TIMEOUT" env VITJOB_TEST_TMP="$TMP" \
      VITJOB_REPLICAS="$w" VITJOB_RANK="$rank" VITJOB_RESTART="$gen" \
      VITJOB_RDZV_ENDPOINT="127.0.0.1:$port" VITJOB_COMM_HOST=127.0.0.1 \
      "$WORKER" train "$@" --log-level info > "$out/rank-$rank.out" 2> "$out/rank-$rank.log" || rc=$?
    echo "$rc" > "$out/rank-$rank.rc" ) &
  RANK_PIDS+=($!)
}

# rank0_logged DIR PATTERN WHAT: waits until DIR/rank-0.log has a line
# matching PATTERN (grep), at most 120 s and no longer than rank 0 runs;
# fails saying "rank 0 logged no WHAT", with the log's end, if it has none
rank0_logged() {
  local dir=$1 pattern=$2 what=$3 _
  for _ in $(seq 1 1200); do
    grep -q -- "$pattern" "$dir/rank-0.log" 2>/dev/null && return 0
    [ ! -f "$dir/rank-0.rc" ] || break
    sleep 0.1
  done
  grep -q -- "$pattern" "$dir/rank-0.log" 2>/dev/null ||
    { echo "rank 0 logged no $what within 120 s (or before it exited)"; tail -5 "$dir/rank-0.log"; false; }
}

# wait_ranks: waits for the ranks and pods this test started (RANK_PIDS), not
# for every child of the test: bats' own per-test timer (BATS_TEST_TIMEOUT)
# is one too, and a bare `wait` would wait it out and fail as a timeout
wait_ranks() {
  local p
  for p in "${RANK_PIDS[@]}"; do wait "$p" || true; done
  RANK_PIDS=()
}

# run_world W OUTDIR [worker args...]: W ranks; rank 0 writes OUTDIR/metrics.jsonl
# and, when asked, exports. Waits for all; fails unless every rank exited 0.
run_world() {
  local w=$1 out=$2
  shift 2
  mkdir -p "$out"
  local port; port=$(free_port)
  RANK_PIDS=()
  for r in $(seq 0 $((w - 1))); do
    if [ "$r" -eq 0 ]; then
      start_rank "$w" 0 "$port" 0 "$out" "$@" --metrics "$out/metrics.jsonl"
    else
      start_rank "$w" "$r" "$port" 0 "$out" "$@"
    fi
  done
  wait "${RANK_PIDS[@]}"   # the ranks only, not a test's servers
  for r in $(seq 0 $((w - 1))); do
    if [ "$(cat "$out/rank-$r.rc")" != 0 ]; then
      echo "rank $r exited $(cat "$out/rank-$r.rc")"; tail -5 "$out/rank-$r.log"; return 1
    fi
  done
}

# compare A.jsonl B.jsonl TOL: the same steps, skipped alike (fp16-mixed:
# grad_norm null in both, the same loss_scale, skipped_steps and skipped;
# keys a precision does not log are absent in both), and every step's loss
# and grad_norm within TOL (relative)
compare() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
tol = float(sys.argv[3])
assert len(a) == len(b) and a, (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    for k in ("loss_scale", "skipped_steps", "skipped"):
        assert x.get(k) == y.get(k), (x["step"], k, x.get(k), y.get(k))
    for k in ("loss", "grad_norm"):
        if x[k] is None or y[k] is None:
            assert x[k] is None and y[k] is None, (x["step"], k)
            continue
        worst = max(worst, abs(x[k] - y[k]) / max(abs(x[k]), 1e-12))
print("steps %d, worst relative difference %.3g (bound %g)" % (len(a), worst, tol))
sys.exit(0 if worst < tol else 1)
PY
}

# same_from A.jsonl B.jsonl FROM: B's loss lines are A's of the steps > FROM,
# byte for byte
same_from() {
  cmp <(grep '"loss"' "$1" | python3 -c "import json,sys; [print(l, end='') for l in sys.stdin if json.loads(l)['step'] > $3]") \
      <(grep '"loss"' "$2")
}

# weights A B TOL: the two safetensors exports agree within TOL, absolute,
# except the attention's key bias (the middle third of each attn.qkv.bias),
# held to 10 x TOL and reported apart. (Not relative, and the key bias apart:
# softmax ignores a constant per query row, so the key bias has an exactly
# zero gradient in exact arithmetic; its gradient is rounding noise that
# AdamW normalises into lr-sized steps, and another summation order, or the
# attention's backward recomputing its probabilities from the saved
# log-sum-exp, moves it by 1e-4 to 2e-4 in a few steps.)
weights() {
  python3 - "$1" "$2" "$3" <<'PY'
import array, json, struct, sys
def load(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        b, e = v["data_offsets"]
        out[k] = array.array("f", data[b:e])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys()
tol = float(sys.argv[3])
worst, where, kworst, kwhere = 0.0, "", 0.0, ""
for k in a:
    x, y = a[k], b[k]
    key = range(len(x) // 3, 2 * len(x) // 3) if k.endswith("attn.qkv.bias") else range(0)
    d = max((abs(x[i] - y[i]) for i in range(len(x)) if i not in key), default=0.0)
    if d >= worst: worst, where = d, k
    if len(key) and max(abs(x[i] - y[i]) for i in key) >= kworst:
        kworst, kwhere = max(abs(x[i] - y[i]) for i in key), k
print("tensors %d, worst absolute difference %.3g in %s (bound %s); key bias %.3g in %s (bound %.3g)"
      % (len(a), worst, where, tol, kworst, kwhere, 10 * tol))
sys.exit(0 if worst < tol and kworst < 10 * tol else 1)
PY
}


# moto_start DIR BUCKET: for setup_file: moto's S3 server
# (tests/s3/moto_server.py, run by $PY) on a free loopback port with BUCKET
# made, waited for; its env (S3_ENDPOINT, AWS_*) exported, its log in
# DIR/moto.log, its pid in DIR/moto.pid for moto_stop DIR (teardown_file).
# Without moto and boto3 in $PY it starts nothing and exports S3_SKIP, which
# says why (the caller's setup skips on it).
moto_start() {
  local dir=$1 bucket=$2
  if ! "$PY" -c 'import moto, boto3' 2>/dev/null; then
    export S3_SKIP="no moto and boto3 in $PY (set VITJOB_TEST_PYTHON)"
    return 0
  fi
  "$PY" tests/s3/moto_server.py --port 0 --env-out "$dir/s3.env" --bucket "$bucket" \
    > "$dir/moto.log" 2>&1 3>&- &
  echo $! > "$dir/moto.pid"
  for _ in $(seq 1 300); do [ -s "$dir/s3.env" ] && break; sleep 0.1; done
  [ -s "$dir/s3.env" ] || { cat "$dir/moto.log"; return 1; }
  set -a; . "$dir/s3.env"; set +a
}

moto_stop() {
  [ -f "$1/moto.pid" ] && kill "$(cat "$1/moto.pid")" 2>/dev/null
  return 0
}

# ck_backend_start: for setup_file of a suite run on either checkpoint
# backend (CK_BACKEND=file, the default, or s3): with s3, moto_start with
# bucket vitjob-ck (S3_SKIP when moto and boto3 are missing: setup skips).
# ck_backend_stop: for teardown_file.
ck_backend_start() {
  export CK_BACKEND=${CK_BACKEND:-file}
  [ "$CK_BACKEND" = s3 ] || return 0
  export PY=${VITJOB_TEST_PYTHON:-python3}
  moto_start "$BATS_FILE_TMPDIR" vitjob-ck
}

ck_backend_stop() {
  moto_stop "$BATS_FILE_TMPDIR"
}

# s3: true when this suite's checkpoints are on S3 (CK_BACKEND=s3)
s3() { [ "$CK_BACKEND" = s3 ]; }

# uri NAME: where this test's checkpoints called NAME live (on S3: bucket
# vitjob-ck, under a prefix of this test's own)
uri() {
  if s3; then echo "s3://vitjob-ck/$(basename "$TMP")/$1"; else echo "file://$TMP/$1"; fi
}

# ck_endpoint (setup): sets ENDPOINT to what the `checkpoints` and `export`
# commands need to reach the checkpoints (--endpoint on S3, nothing on file://)
ck_endpoint() {
  ENDPOINT=()
  if s3; then ENDPOINT=(--endpoint "$S3_ENDPOINT"); fi
}
