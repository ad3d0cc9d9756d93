# tests/recipe_helpers.bash - loaded by the bats files that train fmnist_tiny
# for a few steps to compare runs with each other (ranks, ckpt, ema,
# regularization, freeze, fp16, data, randaug, worker): the small
# Fashion-MNIST they write (tests/fmnist_subset.py) and the settings of a
# short run that they share. Must not: start processes (ranks_helpers.bash
# does) or hold any test's expectations.

# fmnist_subset OUT TRAIN TEST: the first TRAIN training and TEST test images
# of Fashion-MNIST as IDX files in OUT (tests/fmnist_subset.py)
fmnist_subset() {
  /usr/bin/python3 "$BATS_TEST_DIRNAME/fmnist_subset.py" "$1" --train "$2" --test "$3"
}

# The data set of the short runs, written once per file (setup_file:
# recipe_data): 2400 training images (50 steps of 48 make an epoch: no run
# of these files crosses one, as none did on the whole set) and 400 test
# images (the evaluation at the end of each run, which on the whole test set
# costs ten times the 8 steps before it, stays short). What these files
# prove (runs equal bit for bit, or within a bound, across ranks, shardings
# and resumes) holds for any data; the accuracy tests (learning.bats,
# finetune.bats) keep the whole set.
RECIPE_TRAIN=2400
RECIPE_TEST=400
recipe_data() {
  fmnist_subset "$BATS_FILE_TMPDIR/fm" "$RECIPE_TRAIN" "$RECIPE_TEST"
}

# recipe_args [worker args...]: sets ARGS to a short run on that data (8
# steps of 48 in micro-batches of 4, one thread, no export, a minute for the
# rendezvous and each collective), then the arguments given, which override
# (the last --set of a key wins)
recipe_args() {
  ARGS=(--set data.uri="file://$BATS_FILE_TMPDIR/fm"
        --set training.steps=8 --set training.optimizer.warmupSteps=2
        --set training.globalBatchSize=48 --set training.microBatchSize=4
        --set training.threads=1 --set training.exportPath=
        --set training.rendezvousTimeoutSeconds=60 --set training.collectiveTimeoutSeconds=60
        "$@")
}

