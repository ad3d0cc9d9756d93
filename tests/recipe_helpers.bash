# tests/recipe_helpers.bash - loaded by the bats files that train fmnist_tiny
# for a few steps to compare runs with each other (ranks, ckpt, ema,
# regularization, freeze, fp16, data, randaug, mixup, worker, fence,
# stdfds): the
# Fashion-MNIST subsets they write (tests/fmnist_subset.py) and the settings
# of a short run that they share. Must not: start processes
# (ranks_helpers.bash does) or hold any test's expectations.

# fmnist_subset OUT TRAIN TEST [option...]: the first TRAIN training and TEST
# test images of Fashion-MNIST ("all": every one) as IDX files in OUT
# (tests/fmnist_subset.py, which takes the options)
fmnist_subset() {
  local out=$1 train=$2 test=$3
  shift 3
  /usr/bin/python3 "$BATS_TEST_DIRNAME/fmnist_subset.py" "$out" --train "$train" --test "$test" "$@"
}

# fmnist_short OUT TEST: every training image (uncompressed: a process loads
# them in a tenth of the time gunzip takes) and the first TEST test images.
# A run on it trains bit for bit as on the whole data set (the same images
# in the same order; tested: the loss lines are identical) and its
# evaluations, which on the 10000 test images cost about ten times the 8
# steps before them, stay short. For the files that compare runs with each
# other (bit for bit, or within a bound: across ranks, shardings, resumes),
# where no accuracy is weighed on the whole test set.
fmnist_short() {
  fmnist_subset "$1" all "$2" --level 0
}

# recipe_data (setup_file): the data set of recipe_args, every training
# image and 400 test images, in BATS_FILE_TMPDIR/fm
recipe_data() {
  fmnist_short "$BATS_FILE_TMPDIR/fm" 400
}

# recipe_args [worker args...]: sets ARGS to a short run on recipe_data (8
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

