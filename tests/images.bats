#!/usr/bin/env bats
# tests/images.bats - the container images (docker/operator.Dockerfile,
# docker/worker.Dockerfile, CPU variant) built with buildah from a local
# Debian 12 base made with debootstrap (no registry is reachable here), and
# run with `buildah run --isolation chroot`: the operator prints its version
# as user 65532, the worker prints its version and trains a few steps as
# user 65532. Run by `make image-test` (needs root, buildah, debootstrap and
# Debian's mirror). BUILD: where the base rootfs and buildah's storage live
# (default build/, they are kept between runs: the base is made once).

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=900}"

# buildah with its own storage under BUILD/image, vfs (no overlay mounts needed)
bh() { buildah --root "$IMG/storage" --runroot "$IMG/run" --storage-driver vfs "$@"; }

setup_file() {
  ROOT=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
  export ROOT
  export IMG=${BUILD:-$ROOT/build}/image
  mkdir -p "$IMG"
  export BUILDAH_ISOLATION=chroot
  export BASE=localhost/vitjob-base:bookworm
  if ! bh inspect --type image "$BASE" >/dev/null 2>&1; then
    if [ ! -x "$IMG/rootfs/usr/bin/apt-get" ]; then
      rm -rf "$IMG/rootfs"
      debootstrap --variant=minbase bookworm "$IMG/rootfs" http://deb.debian.org/debian \
        > "$IMG/debootstrap.log" 2>&1 || { tail -20 "$IMG/debootstrap.log"; return 1; }
    fi
    local c; c=$(bh from scratch)
    bh copy "$c" "$IMG/rootfs/" / >/dev/null
    bh config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
    bh commit --quiet --rm "$c" "$BASE" >/dev/null
  fi
  COMMIT=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  export COMMIT
  # the two images built at once: one's apt-get and layer copies (waiting on
  # the mirror and the disk) overlap the other's compiling
  local names=(operator worker) pids=() img i bad=0
  for img in "${names[@]}"; do
    bh bud --quiet --isolation chroot --layers=false -f "$ROOT/docker/$img.Dockerfile" \
      --build-arg BUILD_BASE="$BASE" --build-arg RUNTIME_BASE="$BASE" \
      --build-arg GIT_COMMIT="$COMMIT" -t "localhost/vitjob-$img:test" "$ROOT" \
      > "$IMG/build-$img.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!names[@]}"; do
    img=${names[$i]}
    wait "${pids[$i]}" || { echo "building the $img image failed:"; tail -40 "$IMG/build-$img.log"; bad=1; }
  done
  [ "$bad" -eq 0 ]
}

teardown_file() {
  [ -f "$BATS_FILE_TMPDIR/pids" ] && kill $(cat "$BATS_FILE_TMPDIR/pids") 2>/dev/null
  for c in $(bh containers -q 2>/dev/null); do bh rm "$c" >/dev/null 2>&1 || true; done
}

@test "the operator image runs --version as user 65532 and prints the release, the commit and its backends" {
  c=$(bh from --quiet localhost/vitjob-operator:test)
  run bh run --isolation chroot "$c" -- /usr/local/bin/vitjob-operator --version
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "${lines[0]}" == "vitjob-operator 0.1.0" ]]
  [[ "$output" == *"commit: $COMMIT"* ]]
  [[ "$output" == *"backends: kubernetes API over libcurl/"* ]]
  run bh run --isolation chroot "$c" -- id -u
  bh rm "$c" >/dev/null
  [ "$output" = 65532 ]
}

@test "the operator image is non-root with an entrypoint, OCI labels, no compiler, and an operator binary that links no BLAS" {
  run bh inspect --type image --format '{{.OCIv1.Config.User}}|{{index .OCIv1.Config.Entrypoint 0}}|{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}|{{index .OCIv1.Config.Labels "org.opencontainers.image.revision"}}' localhost/vitjob-operator:test
  echo "$output"
  [ "$output" = "65532:65532|/usr/local/bin/vitjob-operator|0.1.0|$COMMIT" ]
  c=$(bh from --quiet localhost/vitjob-operator:test)
  # the BLAS and gloo in the image are its planner's (vitjob-worker plan), not the operator's
  run bh run --isolation chroot "$c" -- sh -c 'command -v gcc cc make; ldd /usr/local/bin/vitjob-operator | grep -c -e openblas -e sleef -e gloo; true'
  bh rm "$c" >/dev/null
  echo "$output"
  [ "$output" = 0 ]
}

@test "the operator image's planner plans a GPU job from stdin as user 65532, the way the operator runs it" {
  c=$(bh from --quiet localhost/vitjob-operator:test)
  run bh run --isolation chroot "$c" -- sh -c \
    'echo "{\"model\": {\"preset\": \"vit_b16\"}, \"data\": {\"format\": \"webdataset\", \"uri\": \"s3://b/s-{0..9}.tar\"}}" |
     /usr/local/bin/vitjob-worker plan --config - --replicas 2 --device cuda --gpu-memory 80Gi --json'
  bh rm "$c" >/dev/null
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *'"fits":	true'* ]]
}

@test "the operator in its image runs as user 65532 on a read-only root filesystem: it reaches an API server and is healthy" {
  state=$BATS_FILE_TMPDIR/api
  /usr/bin/python3 "$ROOT/tests/cluster/apiserver" --state "$state" --port 0 > "$BATS_FILE_TMPDIR/api.log" 2>&1 3>&- &
  api=$!
  echo "$api" > "$BATS_FILE_TMPDIR/pids"
  for _ in $(seq 1 200); do [ -s "$state/port" ] && break; sleep 0.1; done
  # /tmp as the Deployment gives it: an emptyDir (here the kubeconfig's home)
  tmp=$BATS_FILE_TMPDIR/optmp
  mkdir -p "$tmp" && cp "$state/kubeconfig" "$tmp/kubeconfig" && chmod 755 "$tmp" && chmod 644 "$tmp/kubeconfig"
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  c=$(bh from --quiet localhost/vitjob-operator:test)
  mnt=$(bh mount "$c")
  # the image's root bind-mounted read-only over itself, in a mount namespace of its own
  ro='mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && mount --bind "$2" "$1/tmp" &&
      mount -t proc proc "$1/proc" && shift 2 && exec chroot --userspec=65532:65532 "$R" "$@"'
  run unshare --mount --propagation private sh -c "R=$mnt; $ro" _ "$mnt" "$tmp" /bin/sh -c 'touch /usr/x'
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *"Read-only file system"* ]]
  unshare --mount --propagation private sh -c "R=$mnt; $ro" _ "$mnt" "$tmp" \
    /usr/local/bin/vitjob-operator --kubeconfig /tmp/kubeconfig --metrics-addr ":$port" \
    > "$BATS_FILE_TMPDIR/operator.log" 2>&1 3>&- &
  op=$!
  echo "$op" >> "$BATS_FILE_TMPDIR/pids"
  healthy=0
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; then healthy=1; break; fi
    sleep 0.1
  done
  ready=$(curl -s "http://127.0.0.1:$port/readyz" || true)
  kill "$op" 2>/dev/null; wait "$op" || true
  kill "$api" 2>/dev/null; wait "$api" || true
  bh umount "$c" >/dev/null; bh rm "$c" >/dev/null
  cat "$BATS_FILE_TMPDIR/operator.log"
  [ "$healthy" = 1 ]
  grep -q "event=start" "$BATS_FILE_TMPDIR/operator.log"
  ! grep -qi "read-only\|permission denied" "$BATS_FILE_TMPDIR/operator.log"
  echo "readyz: $ready"
}

@test "the CPU worker image prints its version and backends and trains a few steps as user 65532, its OpenMP threads set to sleep when idle" {
  c=$(bh from --quiet localhost/vitjob-worker:test)
  run bh run --isolation chroot "$c" -- vitjob-worker --version
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "${lines[0]}" == "vitjob-worker 0.1.0" ]]
  [[ "$output" == *"commit: $COMMIT"* ]]
  [[ "$output" == *"backends: cpu (OpenBLAS"*"gloo; cuda, nccl: not built"* ]]
  run bh run --isolation chroot -v /usr/share/datasets/fashion-mnist:/data:ro "$c" -- \
    sh -c 'id -u; echo "OMP_WAIT_POLICY=$OMP_WAIT_POLICY"; vitjob-worker train --set data.uri=file:///data --set training.steps=20 \
      --set training.optimizer.warmupSteps=2 --set training.globalBatchSize=32 \
      --set training.microBatchSize=32 --set training.threads=1 --set training.evalInterval=0 \
      --set training.exportPath=/tmp/w.safetensors --log-level warn && ls -l /tmp/w.safetensors'
  bh rm "$c" >/dev/null
  echo "$output"
  [ "$status" -eq 0 ]
  [ "${lines[0]}" = 65532 ]
  [ "${lines[1]}" = OMP_WAIT_POLICY=PASSIVE ]   # OpenMP's idle threads sleep (the Dockerfile says why)
  [[ "$output" == *'"event":"summary","steps":20'* ]]
  [[ "$output" == *"/tmp/w.safetensors"* ]]
}
