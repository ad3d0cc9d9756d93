#!/usr/bin/env bats
# tests/limits.bats - every test has a time limit of its own, so that a
# regression that hangs fails in minutes and names its test instead of
# running until CI's limit: each .bats file sets BATS_TEST_TIMEOUT, each
# Python test module runs under tests/cluster/testlimit.py, and both really
# stop a hanging test, naming it (tests/run.sh adds Criterion's --timeout
# and a limit per suite).

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

setup() {
  cd "$BATS_TEST_DIRNAME/.."
  TMP=$(mktemp -d)
}

teardown() {
  rm -rf "$TMP"
}

@test "every .bats file sets its tests' BATS_TEST_TIMEOUT before its first test" {
  local missing=()
  for f in tests/*.bats; do
    # the assignment, at top level, before the first @test
    awk '/^@test /{exit 1} /^: "\$\{BATS_TEST_TIMEOUT:=[0-9]+\}"$/{found=1; exit 0} END{exit !found}' "$f" ||
      missing+=("$f")
  done
  [ ${#missing[@]} -eq 0 ] || { echo "no BATS_TEST_TIMEOUT before the first test: ${missing[*]}"; false; }
}

@test "no bats test waits with a bare wait, which would wait out bats' own per-test timer" {
  # bats runs its timer as a child of the test: `wait` with no operand waits
  # for it too, so the test would sit until its limit and fail as a timeout
  run grep -nE '(^|[;&|({]|then|do|else)[[:space:]]*wait[[:space:]]*($|[;&|)}#])' tests/*.bats tests/*.bash
  echo "$output"
  [ "$status" -eq 1 ]
}

@test "every Python test module runs its tests under testlimit.main" {
  local missing=()
  for f in tests/cluster/test_*.py tests/chart/test_*.py; do
    grep -q '^    testlimit\.main([0-9]\+)$' "$f" && ! grep -q 'unittest\.main(' "$f" ||
      missing+=("$f")
  done
  [ ${#missing[@]} -eq 0 ] || { echo "not under testlimit.main: ${missing[*]}"; false; }
}

@test "a hanging bats test with the file's limit fails naming itself, and its children are stopped" {
  local at=@ # bats would take a test line in this file's own heredoc for its own
  cat > "$TMP/hang.bats" <<BATS
: "\${BATS_TEST_TIMEOUT:=2}"
${at}test "this one hangs" {
  sleep 7777.$$ &
  sleep 60
}
${at}test "this one passes" {
  true
}
BATS
  run env -u BATS_TEST_TIMEOUT timeout 60 bats --tap "$TMP/hang.bats"
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *"not ok 1 this one hangs # timeout after 2s"* ]]
  [[ "$output" == *"ok 2 this one passes"* ]]
  # stopped: signalled, it may take a moment to go (this run's own sleep,
  # named by this shell's pid, not another run's)
  for _ in $(seq 1 300); do pgrep -f "sleep 7777\.$$\b" > /dev/null || break; sleep 0.1; done
  ! pgrep -af "sleep 7777\.$$\b" || { echo "the hanging test's child still runs after 30 s"; false; }
}

@test "a hanging Python test fails naming itself and its limit, even through except Exception, and the module goes on" {
  cat > "$TMP/test_hang.py" <<PY
import time, unittest
from tests.cluster import testlimit

class Hang(unittest.TestCase):
    def test_a_retry_loop_that_never_ends(self):
        while True:
            try:
                time.sleep(60)
            except Exception:
                pass

    def test_b_fine(self):
        pass

if __name__ == "__main__":
    testlimit.main(2)
PY
  run env -u VITJOB_TEST_TIMEOUT PYTHONPATH="$PWD" timeout 60 /usr/bin/python3 "$TMP/test_hang.py" -v
  echo "$output"
  [ "$status" -eq 1 ]
  [[ "$output" == *"TestTimeout: __main__.Hang.test_a_retry_loop_that_never_ends: still running after its limit of 2s"* ]]
  [[ "$output" == *"test_b_fine (__main__.Hang.test_b_fine) ... ok"* ]]
  [[ "$output" == *"Ran 2 tests"* ]]
}

@test "VITJOB_TEST_TIMEOUT overrides a Python module's limit, and a value that is not a number is refused naming it" {
  cat > "$TMP/test_short.py" <<PY
import time, unittest
from tests.cluster import testlimit

class Short(unittest.TestCase):
    def test_sleeps_three_seconds(self):
        time.sleep(3)

if __name__ == "__main__":
    testlimit.main(1)
PY
  VITJOB_TEST_TIMEOUT=30 PYTHONPATH="$PWD" run timeout 60 /usr/bin/python3 "$TMP/test_short.py"
  echo "$output"
  [ "$status" -eq 0 ]
  VITJOB_TEST_TIMEOUT=soon PYTHONPATH="$PWD" run timeout 60 /usr/bin/python3 "$TMP/test_short.py"
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *"VITJOB_TEST_TIMEOUT='soon': not a whole number of seconds"* ]]
}
