#!/usr/bin/env bats
# tests/schema.bats - the files that the config table (api/config_keys.c) and the
# exit-code table (api/exitcode.c) write through api/config_schema.c are what
# they write: the config keys' schema in manifests/00-crd.yaml, the chart's
# byte copy of that CRD, the README's key table, and docs/design.md's spec
# summary and exit-code table. A stale file fails its test, named, with the
# diff; `make schema` writes them again; a hand edit inside a generated
# region is stale. Also: `vitjob-worker schema` refuses files whose generated
# regions it cannot place.
#
# BUILD (default build) points at the build tree; WORKER may override the
# binary (the ASan run uses build/asan).

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

setup() {
  cd "$BATS_TEST_DIRNAME/.."
  BUILD=${BUILD:-build}
  WORKER=${WORKER:-$BUILD/bin/vitjob-worker}
  TMP=$(mktemp -d)
}

teardown() { rm -rf "$TMP"; }

# fresh FILE: FILE is what `vitjob-worker schema FILE` writes; else the diff
# and what to do
fresh() {
  "$WORKER" schema "$1" > "$TMP/new" || { echo "vitjob-worker schema $1 failed"; return 1; }
  diff -u --label "$1 (committed)" --label "$1 (as make schema writes it)" "$1" "$TMP/new" ||
    { echo "$1 is stale: the config table in api/config_keys.c (or api/exitcode.c's) says otherwise; run make schema"
      return 1; }
}

# stale_after SED [TEXT...]: a copy of docs/design.md, $TMP/design.md, with
# the sed script SED applied (which must change it) is stale, the diff
# showing each TEXT
stale_after() {
  sed "$1" docs/design.md > "$TMP/design.md"
  ! cmp -s docs/design.md "$TMP/design.md" || { echo "sed '$1' changed nothing"; return 1; }
  run fresh "$TMP/design.md"
  echo "$output"
  [ "$status" -ne 0 ] && [[ "$output" == *"$TMP/design.md is stale"* ]] || return 1
  shift
  for text; do [[ "$output" == *"$text"* ]] || { echo "no '$text' in the diff"; return 1; }; done
}

@test "manifests/00-crd.yaml: the config keys' schema is what make schema writes" {
  fresh manifests/00-crd.yaml
}

@test "README.md: the config key table is what make schema writes" {
  fresh README.md
}

@test "docs/design.md: the spec summary and the exit-code table are what make schema writes" {
  fresh docs/design.md
}

@test "docs/design.md: a hand edit of the spec summary is stale" {
  cp docs/design.md "$TMP/design.md"
  fresh "$TMP/design.md" # an unedited copy is fresh
  local region='/BEGIN generated: config-summary/,/END generated: config-summary/'
  stale_after "${region}s/, intervalSteps//" '-  checkpoint: {uri, keep,' # a key taken out
  stale_after "${region}s/{uri,/{uri, retries,/" '-  checkpoint: {uri, retries,' # one added
}

@test "docs/design.md: a hand edit of the exit-code table is stale" {
  local region='/BEGIN generated: exit-codes/,/END generated: exit-codes/'
  stale_after "${region}s/^| \`data\` | 3 | no |/| \`data\` | 1 | yes |/" '-| `data` | 1 | yes |' # a code
  stale_after "${region}s/^| \`stopped\` .*/&\n| \`killed\` | 137 | yes | SIGKILL |/" '-| `killed` | 137' # a row
}

@test "charts/vitjob-operator/crds/vitjobs.vitjob.dev.yaml is manifests/00-crd.yaml byte for byte" {
  diff -u --label "charts/vitjob-operator/crds/vitjobs.vitjob.dev.yaml (committed)" \
    --label "manifests/00-crd.yaml (what make schema copies)" \
    charts/vitjob-operator/crds/vitjobs.vitjob.dev.yaml manifests/00-crd.yaml ||
    { echo "charts/vitjob-operator/crds/vitjobs.vitjob.dev.yaml is stale: run make schema"; false; }
}

@test "schema with no file prints the properties of every section" {
  run "$WORKER" schema
  [ "$status" -eq 0 ]
  for s in model data training training.optimizer training.ema checkpoint; do
    [[ "$output" == *"# spec.$s.properties"* ]]
  done
  [[ "$output" == *"globalBatchSize:"* ]]
}

@test "a CRD without the region of a section that has keys is refused, naming a key" {
  grep -v 'generated: checkpoint' manifests/00-crd.yaml > "$TMP/crd.yaml"
  run "$WORKER" schema "$TMP/crd.yaml"
  [ "$status" -eq 2 ]
  [[ "$output" == *"class=config "* ]]
  [[ "$output" == *"$TMP/crd.yaml: no region 'BEGIN generated: checkpoint' for the key checkpoint.uri"* ]]
}

@test "a region without its end marker is refused, naming the line" {
  grep -v 'END generated: checkpoint' manifests/00-crd.yaml > "$TMP/crd.yaml"
  line=$(grep -n 'BEGIN generated: checkpoint' "$TMP/crd.yaml" | cut -d: -f1)
  run "$WORKER" schema "$TMP/crd.yaml"
  [ "$status" -eq 2 ]
  [[ "$output" == *"$TMP/crd.yaml:$line: 'BEGIN generated: checkpoint' has no 'END generated: checkpoint'"* ]]
  # one in the middle: the next region's end marker does not close it
  grep -v 'END generated: data' manifests/00-crd.yaml > "$TMP/crd.yaml"
  line=$(grep -n 'BEGIN generated: data' "$TMP/crd.yaml" | cut -d: -f1)
  run "$WORKER" schema "$TMP/crd.yaml"
  [ "$status" -eq 2 ]
  [[ "$output" == *"'END generated: training' closes 'BEGIN generated: data' of line $line"* ]]
}

@test "a region naming no section of the table is refused" {
  sed 's/generated: data\b/generated: dta/' manifests/00-crd.yaml > "$TMP/crd.yaml"
  run "$WORKER" schema "$TMP/crd.yaml"
  [ "$status" -eq 2 ]
  [[ "$output" == *"no config key is directly in section 'dta'"* ]]
}

@test "a file without any region is refused, and nothing is printed" {
  printf 'kind: ConfigMap\n' > "$TMP/x.yaml"
  "$WORKER" schema "$TMP/x.yaml" > "$TMP/out" 2> "$TMP/err" && false
  [ ! -s "$TMP/out" ]
  grep -q "no generated region" "$TMP/err"
}

@test "schema with two files is a usage error" {
  run "$WORKER" schema README.md README.md
  [ "$status" -eq 2 ]
  [[ "$output" == *"class=usage "* ]]
  [[ "$output" == *"usage: vitjob-worker schema [FILE]"* ]]
}
