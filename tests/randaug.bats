#!/usr/bin/env bats
# tests/randaug.bats - data.randAugment and data.randomErasing:
# worker/data/randaug.c and erasing.c against a reference written from
# timm's documented behaviour with PIL (Debian's python3-pil) and torch,
# through the test driver build/bin/ra_check (tests/ref/ra_check.c; what each
# check covers is in tests/ref/randaug_torch.py); the config's refusals; and
# a training run on webdataset shards (written by `vitjob-worker shards` from
# a Fashion-MNIST subset) with DeiT's rand-m9-mstd0.5-inc1 and erasing 0.25
# that is the same, bit for bit, with 1 and with 3 decode threads. Nothing
# is downloaded: the images are made by the script or the shard writer.
#
# BUILD (default build) points at the build tree; RA_CHECK may name another
# ra_check and WORKER another vitjob-worker (the sanitized ones).

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

load recipe_helpers

setup() {
  cd "$BATS_TEST_DIRNAME/.."
  BUILD=${BUILD:-build}
  RA_CHECK=${RA_CHECK:-$BUILD/bin/ra_check}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  [ -x "$RA_CHECK" ] || { echo "no $RA_CHECK (make $RA_CHECK)"; false; }
  TMP=$(mktemp -d)
}

teardown() {
  rm -rf "$TMP"
}

ref() { /usr/bin/python3 -m tests.ref.randaug_torch "$1" --bin "$RA_CHECK" --workdir "$TMP" --quiet; }

@test "each RandAugment op is PIL's byte for byte: 21 ops, both sets, nearest/bilinear/bicubic, two fills, edge arguments" {
  run ref ops
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"ops: 8525 cases, 0 failed"* ]]
}

@test "timm's level-to-argument rules: the same argument for every op at 2,001 magnitudes in [0, 30], both signs" {
  run ref args
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"args: 84042 cases, 0 differ"* ]]
}

@test "RandAugment's choice, probability, magnitude noise and signs: timm's algorithm fed the same numbers gives the same ops and bytes" {
  run ref apply
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"apply: 280 cases"*", 0 failed"* ]]
}

@test "random erasing is timm's RandomErasing fed the same numbers: the same box, values within 1e-5 (pixel, rand, const)" {
  run ref erase
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"erase: 216 cases"*", 0 failed"* ]]
}

@test "the 8-bit crop RandAugment works on is PIL's crop + resize within 2 (under 1% of bytes differ); normalising it is ToTensor + Normalize" {
  run ref u8
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"u8: 60 cases, 0 failed"* ]]
  run ref norm
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"norm: 4 cases, 0 failed"* ]]
}

@test "a bad data.randAugment is a config error naming the key and the section; both keys need data.augment and images" {
  local d=(--set data.format=webdataset --set data.uri="$TMP/none-{0..1}.tar" --set data.augment=true
           --set training.exportPath=)
  run "$WORKER" train "${d[@]}" --set data.randAugment=rand-m9-foo1
  echo "$output"
  [ "$status" -eq 2 ]
  [[ "$output" == *'data.randAugment=\"rand-m9-foo1\": unknown section \"foo1\"'* ]]
  run "$WORKER" train "${d[@]}" --set data.randAugment=rand-m9.5
  [ "$status" -eq 2 ]
  [[ "$output" == *'section \"m9.5\": \"9.5\" is not an integer'* ]]
  run "$WORKER" train "${d[@]}" --set data.randAugment=aug-m9
  [ "$status" -eq 2 ]
  [[ "$output" == *'data.randAugment=\"aug-m9\": the string must start with \"rand\"'* ]]
  run "$WORKER" train --set data.randAugment=rand-m9-mstd0.5-inc1
  [ "$status" -eq 2 ]
  [[ "$output" == *"data.randAugment does not fit data.format=fashion-mnist"* ]]
  run "$WORKER" train --set data.format=webdataset --set data.uri="$TMP/x.tar" --set data.augment=false --set data.randomErasing=0.25
  [ "$status" -eq 2 ]
  [[ "$output" == *"data.randomErasing needs data.augment=true"* ]]
  run "$WORKER" train "${d[@]}" --set data.randomErasing=1.5
  [ "$status" -eq 2 ]
  [[ "$output" == *"data.randomErasing"* ]]
  run "$WORKER" train "${d[@]}" --set data.randomErasingMode=noise
  [ "$status" -eq 2 ]
  [[ "$output" == *"data.randomErasingMode"*"pixel, const, rand"* ]]
}

@test "training with rand-m9-mstd0.5-inc1 and erasing 0.25 on shards: 1 and 3 decode threads give the same run bit for bit, and not the run without them" {
  fmnist_subset "$TMP/idx" 300 100
  "$WORKER" shards --from "$TMP/idx" --out "file://$TMP/sh/train-%02d.tar" --samples-per-shard 100 > /dev/null
  local args=(--set data.format=webdataset --set "data.uri=file://$TMP/sh/train-{00..02}.tar"
              --set "data.mean=[0.286]" --set "data.std=[0.353]" --set data.augment=true
              --set data.shuffleBuffer=50 --set training.steps=12 --set training.optimizer.warmupSteps=2
              --set training.globalBatchSize=24 --set training.microBatchSize=8 --set training.threads=1)
  local aug=(--set data.randAugment=rand-m9-mstd0.5-inc1 --set data.randomErasing=0.25)
  "$WORKER" train "${args[@]}" "${aug[@]}" --set data.workers=1 --metrics "$TMP/w1.jsonl" \
    --set training.exportPath="$TMP/w1.st" 2> "$TMP/w1.log" > /dev/null
  "$WORKER" train "${args[@]}" "${aug[@]}" --set data.workers=3 --metrics "$TMP/w3.jsonl" \
    --set training.exportPath="$TMP/w3.st" 2> "$TMP/w3.log" > /dev/null
  "$WORKER" train "${args[@]}" --set data.workers=3 --metrics "$TMP/off.jsonl" \
    --set training.exportPath="$TMP/off.st" 2> "$TMP/off.log" > /dev/null
  run grep -lE 'Sanitizer|runtime error' "$TMP/w1.log" "$TMP/w3.log" "$TMP/off.log"
  [ "$status" -ne 0 ] || { cat "$TMP"/*.log; false; }
  grep '"loss"' "$TMP/w1.jsonl" | head -3
  [ "$(grep -c '"loss"' "$TMP/w1.jsonl")" -eq 12 ]
  cmp <(grep '"loss"' "$TMP/w1.jsonl") <(grep '"loss"' "$TMP/w3.jsonl")
  cmp "$TMP/w1.st" "$TMP/w3.st"
  # (`run` and the status: a `! cmd` line would not fail a bats test)
  run cmp -s <(grep '"loss"' "$TMP/w1.jsonl") <(grep '"loss"' "$TMP/off.jsonl")
  [ "$status" -ne 0 ]
  run cmp -s "$TMP/w1.st" "$TMP/off.st"
  [ "$status" -ne 0 ]
}
