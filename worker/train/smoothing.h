/* worker/train/smoothing.h - label smoothing as soft targets
 * (training.labelSmoothing).
 *
 * Owns: the targets of timm's label smoothing for integer labels: sample b's
 * row is s/K for every class and 1 - s + s/K for its label (timm's
 * LabelSmoothingCrossEntropy: (1 - s) x NLL + s x the mean of -log p over
 * the classes, which is the cross-entropy against these rows; and the
 * off/on values timm's Mixup folds smoothing in with). The model's soft
 * loss (model_forward_soft) trains on them.
 * Must not: touch the model or draw random numbers.
 */
#ifndef VITJOB_SMOOTHING_H
#define VITJOB_SMOOTHING_H

/* out (B,K): s/K everywhere, 1 - s + s/K at column labels[b] of row b
 * (each label in [0, K)); fp32 values computed as timm's (off = s / K,
 * on = 1 - s + off). s = 0: one-hot rows. */
void smoothing_targets(float *out, const int *labels, int B, int K, double s);

#endif
