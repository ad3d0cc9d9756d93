#!/usr/bin/env bats
# tests/operator.bats - the vitjob-operator's command line (operator/main.c,
# the flag table of operator/flags.c): every flag the Helm chart's Deployment
# (charts/vitjob-operator/templates/) and manifests/02-operator.yaml pass is
# one of the table's, as --help lists them, and the args they render parse;
# a bad value or an unknown flag exits 2 naming it.
#
# BUILD (default build) points at the build tree (bin/helmrender renders the
# chart); OPERATOR may override the binary.

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

setup() {
  BUILD=${BUILD:-build}
  OPERATOR=${OPERATOR:-$BUILD/bin/vitjob-operator}
  cd "$BATS_TEST_DIRNAME/.."
}

# the flags --help lists (the table's), one a line
help_flags() {
  "$OPERATOR" --help | grep -oE '^  (-[a-z], )?--[a-z][a-z0-9-]*' | grep -oE -- '--[a-z][a-z0-9-]*'
}

# FILE...: "FILE: --flag" for each --flag of the files' args lists (YAML
# list items that start with --)
args_flags() {
  grep -HoE '^ *- *"?--[a-z][a-z0-9-]*' "$@" | sed -E 's/: *- *"?/: /'
}

# FILE (YAML documents): the args of its one Deployment's container, one a line
deployment_args() {
  python3 - "$1" <<'PY'
import sys, yaml
deps = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "Deployment"]
assert len(deps) == 1, "%s: %d Deployments" % (sys.argv[1], len(deps))
for c in deps[0]["spec"]["template"]["spec"]["containers"]:
    for a in c.get("args", []):
        print(a)
PY
}

@test "every flag the chart and manifests/02-operator.yaml pass to the operator is in its flag table (--help)" {
  run help_flags
  [ "$status" -eq 0 ]
  local known="$output"
  [[ "$known" == *--leader-elect* && "$known" == *--workers* && "$known" == *--help* ]]
  run args_flags charts/vitjob-operator/templates/*.yaml manifests/*.yaml
  local used="$output"
  # the extraction finds both Deployments' args
  [[ "$used" == *"charts/vitjob-operator/templates/deployment.yaml: --leader-elect"* ]]
  [[ "$used" == *"manifests/02-operator.yaml: --leader-elect"* ]]
  local line bad=""
  while IFS= read -r line; do
    grep -qxF -- "${line##*: }" <<< "$known" || bad="$bad"$'\n'"  $line"
  done <<< "$used"
  [ -z "$bad" ] || { echo "flags that vitjob-operator --help does not list:$bad"; false; }
}

@test "the args the chart renders and manifests/02-operator.yaml give parse: flags and values" {
  local files=(manifests/02-operator.yaml) f
  if [ -x "$BUILD/bin/helmrender" ]; then
    "$BUILD/bin/helmrender" charts/vitjob-operator > "$BATS_TEST_TMPDIR/default.yaml"
    "$BUILD/bin/helmrender" --set replicaCount=1 --set leaderElection.enabled=false \
      --set 'watchNamespace={ml,team2}' --set logLevel=debug --set workers=64 \
      charts/vitjob-operator > "$BATS_TEST_TMPDIR/other.yaml"
    files+=("$BATS_TEST_TMPDIR/default.yaml" "$BATS_TEST_TMPDIR/other.yaml")
  else
    echo "# tools/helmrender not built: manifests/02-operator.yaml only" >&3
  fi
  for f in "${files[@]}"; do
    local args=()
    mapfile -t args < <(deployment_args "$f")
    echo "$f: ${args[*]}"
    [ "${#args[@]}" -gt 0 ]
    # the flags parse in order; --help stops there, before main's own checks
    run "$OPERATOR" "${args[@]}" --help
    [ "$status" -eq 0 ] || { echo "$output"; false; }
  done
}

@test "a value the table refuses exits 2 naming the flag and the value" {
  run "$OPERATOR" --workers 0
  [ "$status" -eq 2 ]
  [[ "$output" == *"--workers '0': must be a whole number from 1 to 64"* ]]
  run "$OPERATOR" --lease-duration 8s
  [ "$status" -eq 2 ]
  [[ "$output" == *"--lease-duration '8s': must be a number"* ]]
  run "$OPERATOR" --log-level verbose
  [ "$status" -eq 2 ]
  [[ "$output" == *"--log-level 'verbose': must be debug, info, warn or error"* ]]
}

@test "an unknown or incomplete flag exits 2 naming it, with the flags on stderr" {
  run "$OPERATOR" --no-such-flag
  [ "$status" -eq 2 ]
  [[ "$output" == *"unknown or incomplete argument '--no-such-flag'"* ]]
  [[ "$output" == *"usage: vitjob-operator"* ]]
  run "$OPERATOR" --workers
  [ "$status" -eq 2 ]
  [[ "$output" == *"unknown or incomplete argument '--workers'"* ]]
}
