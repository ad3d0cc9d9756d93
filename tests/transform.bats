#!/usr/bin/env bats
# tests/transform.bats - worker/data/transform.c against torch and
# torchvision (Debian's python3-torch and python3-torchvision), through the
# test driver build/bin/xf_check (tests/ref/xf_check.c); what each check
# covers is in tests/ref/transform_torch.py. Nothing is downloaded: the
# images are random, made by the script.
#
# BUILD (default build) points at the build tree; XF_CHECK may name another
# xf_check (the sanitized one).

# Each test stops after BATS_TEST_TIMEOUT seconds (failing, named), so that a
# regression that hangs fails in minutes; the environment may set another.
: "${BATS_TEST_TIMEOUT:=300}"

setup() {
  cd "$BATS_TEST_DIRNAME/.."
  BUILD=${BUILD:-build}
  XF_CHECK=${XF_CHECK:-$BUILD/bin/xf_check}
  [ -x "$XF_CHECK" ] || { echo "no $XF_CHECK (make $XF_CHECK)"; false; }
}

@test "resampling equals torch's interpolate(antialias=True): bilinear, bicubic, down, up, flips, L, fractional boxes, timm's eval crop" {
  run /usr/bin/python3 tests/ref/transform_torch.py resample --bin "$XF_CHECK"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"resample: 58 cases, 0 failed"* ]]
}

@test "random resized crop is torchvision's get_params: fed the same random numbers, the same boxes" {
  run /usr/bin/python3 tests/ref/transform_torch.py rrc-rule --bin "$XF_CHECK"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"0 cases differ"* ]]
}

@test "random resized crop boxes are distributed as torchvision's (Kolmogorov-Smirnov, fixed seeds)" {
  run /usr/bin/python3 tests/ref/transform_torch.py rrc-dist --bin "$XF_CHECK"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *", 0 failed"* ]]
}
