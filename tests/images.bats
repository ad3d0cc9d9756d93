#!/usr/bin/env bats
# tests/images.bats - the container images (docker/operator.Dockerfile,
# docker/worker.Dockerfile, CPU variant) built with buildah from a local
# Debian 12 base made with debootstrap (no registry is reachable here), and
# run with `buildah run --isolation chroot`: the operator prints its version
# as user 65532, the worker prints its version and trains a few steps as
# user 65532. Run by `make image-test` (needs root, buildah, debootstrap and
# Debian's mirror). BUILD: where the base rootfs and buildah's storage live
# (default build/, they are kept between runs: the base is made once).

setup_file() {
  ROOT=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
  export ROOT
  export IMG=${BUILD:-$ROOT/build}/image
  mkdir -p "$IMG"
  # buildah's own storage under build/, vfs (no overlay mounts needed)
  export BH=(buildah --root "$IMG/storage" --runroot "$IMG/run" --storage-driver vfs)
  export BUILDAH_ISOLATION=chroot
  export BASE=localhost/vitjob-base:bookworm
  if ! "${BH[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
    if [ ! -x "$IMG/rootfs/usr/bin/apt-get" ]; then
      rm -rf "$IMG/rootfs"
      debootstrap --variant=minbase bookworm "$IMG/rootfs" http://deb.debian.org/debian \
        > "$IMG/debootstrap.log" 2>&1 || { tail -20 "$IMG/debootstrap.log"; return 1; }
    fi
    local c; c=$("${BH[@]}" from scratch)
    "${BH[@]}" copy "$c" "$IMG/rootfs/" / >/dev/null
    "${BH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
    "${BH[@]}" commit --quiet --rm "$c" "$BASE" >/dev/null
  fi
  COMMIT=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  export COMMIT
  for img in operator worker; do
    "${BH[@]}" bud --quiet --isolation chroot --layers=false -f "$ROOT/docker/$img.Dockerfile" \
      --build-arg BUILD_BASE="$BASE" --build-arg RUNTIME_BASE="$BASE" \
      --build-arg GIT_COMMIT="$COMMIT" -t "localhost/vitjob-$img:test" "$ROOT" \
      > "$IMG/build-$img.log" 2>&1 || { tail -40 "$IMG/build-$img.log"; return 1; }
  done
}

teardown_file() {
  for c in $("${BH[@]}" containers -q 2>/dev/null); do "${BH[@]}" rm "$c" >/dev/null 2>&1 || true; done
}

# run_in IMAGE [buildah run options] -- CMD...: a throwaway container of IMAGE
run_in() {
  local image=$1; shift
  local c; c=$("${BH[@]}" from --quiet "localhost/vitjob-$image:test")
  run "${BH[@]}" run --isolation chroot "$@"
  local st=$status out=$output
  "${BH[@]}" rm "$c" >/dev/null
  status=$st output=$out
}

@test "the operator image runs --version as user 65532 and prints the release, the commit and its backends" {
  c=$("${BH[@]}" from --quiet localhost/vitjob-operator:test)
  run "${BH[@]}" run --isolation chroot "$c" -- /usr/local/bin/vitjob-operator --version
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "${lines[0]}" == "vitjob-operator 0.1.0" ]]
  [[ "$output" == *"commit: $COMMIT"* ]]
  [[ "$output" == *"backends: kubernetes API over libcurl/"* ]]
  run "${BH[@]}" run --isolation chroot "$c" -- id -u
  "${BH[@]}" rm "$c" >/dev/null
  [ "$output" = 65532 ]
}

@test "the operator image is non-root with an entrypoint, OCI labels, and no compiler or BLAS in it" {
  run "${BH[@]}" inspect --type image --format '{{.OCIv1.Config.User}}|{{index .OCIv1.Config.Entrypoint 0}}|{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}|{{index .OCIv1.Config.Labels "org.opencontainers.image.revision"}}' localhost/vitjob-operator:test
  echo "$output"
  [ "$output" = "65532:65532|/usr/local/bin/vitjob-operator|0.1.0|$COMMIT" ]
  c=$("${BH[@]}" from --quiet localhost/vitjob-operator:test)
  run "${BH[@]}" run --isolation chroot "$c" -- sh -c 'command -v gcc cc make; ls /usr/lib/x86_64-linux-gnu | grep -c -e openblas -e sleef -e gloo'
  "${BH[@]}" rm "$c" >/dev/null
  echo "$output"
  [ "$output" = 0 ]
}

@test "the operator in its image runs with a read-only root filesystem and answers its probes" {
  # a read-only root: the container's root bind-mounted read-only over itself
  c=$("${BH[@]}" from --quiet localhost/vitjob-operator:test)
  mnt=$("${BH[@]}" mount "$c")
  run "${BH[@]}" run --isolation chroot "$c" -- sh -c 'touch /usr/x 2>&1; echo rc=$?'
  [[ "$output" == *"rc=0"* ]]   # writable as built
  "${BH[@]}" umount "$c" >/dev/null
  # the operator with no API server reachable: it starts, serves /healthz and
  # says the API server is unreachable (it needs nothing writable)
  run timeout 5 unshare --mount --propagation private sh -c '
    mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" &&
    chroot --userspec=65532:65532 "$1" /usr/local/bin/vitjob-operator --kubeconfig /nonexistent 2>&1' _ "$mnt"
  "${BH[@]}" rm "$c" >/dev/null
  echo "$output"
  [[ "$output" == *"kubeconfig"* ]]
  [[ "$output" != *"Read-only file system"* ]]
}

@test "the CPU worker image prints its version and backends and trains a few steps as user 65532" {
  c=$("${BH[@]}" from --quiet localhost/vitjob-worker:test)
  run "${BH[@]}" run --isolation chroot "$c" -- vitjob-worker --version
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "${lines[0]}" == "vitjob-worker 0.1.0" ]]
  [[ "$output" == *"commit: $COMMIT"* ]]
  [[ "$output" == *"backends: cpu (OpenBLAS"*"gloo; cuda, nccl: not built"* ]]
  run "${BH[@]}" run --isolation chroot -v /usr/share/datasets/fashion-mnist:/data:ro "$c" -- \
    sh -c 'id -u; vitjob-worker train --set data.uri=file:///data --set training.steps=20 \
      --set training.optimizer.warmupSteps=2 --set training.globalBatchSize=32 \
      --set training.microBatchSize=32 --set training.threads=1 --set training.evalInterval=0 \
      --set training.exportPath=/tmp/w.safetensors --log-level warn && ls -l /tmp/w.safetensors'
  "${BH[@]}" rm "$c" >/dev/null
  echo "$output"
  [ "$status" -eq 0 ]
  [ "${lines[0]}" = 65532 ]
  [[ "$output" == *'"event":"summary","steps":20'* ]]
  [[ "$output" == *"/tmp/w.safetensors"* ]]
}
