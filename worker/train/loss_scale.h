/* worker/train/loss_scale.h - fp16-mixed's dynamic loss scaling, with the
 * rules of torch.cuda.amp.GradScaler (its update, _amp_update_scale_).
 *
 * Owns: the scaler's state (the scale, the growth tracker: clean steps in a
 * row since the scale last changed, and the count of steps skipped), its
 * update after each optimizer step, and the test-only overflow injection's
 * parsing (VITJOB_TEST_INJECT_OVERFLOW).
 * Must not: look at gradients or communicate: the loop (train.c) hands it
 * whether the step's gradients, reduced over every rank, held an inf or a
 * NaN (optim.h: optim_result.skipped), which every rank sees alike, so
 * every rank's scaler stays the same.
 *
 * The rules (GradScaler's defaults): the scale starts at 2^16; the loss
 * gradient's seed is multiplied by it; the gradients are multiplied by
 * lscale_inv (fp32: 1/scale in double, rounded, as GradScaler's unscale_)
 * before the clipping and AdamW. After the step:
 *   inf/NaN found: scale *= 0.5 (backoff), tracker = 0, the step skipped;
 *   else:          tracker + 1 == 2000 (the growth interval): scale *= 2
 *                  (kept when the product would not be finite in fp32),
 *                  tracker = 0; else tracker += 1.
 * The products are taken in double and rounded to fp32, as the CUDA kernel
 * does. Every value is a power of two, so unscaling is exact.
 */
#ifndef VITJOB_LOSS_SCALE_H
#define VITJOB_LOSS_SCALE_H

#define LSCALE_INIT_SCALE 65536.0f
#define LSCALE_GROWTH_FACTOR 2.0
#define LSCALE_BACKOFF_FACTOR 0.5
#define LSCALE_GROWTH_INTERVAL 2000L

typedef struct lscale lscale;

typedef struct {
    float init_scale;      /* LSCALE_INIT_SCALE */
    double growth_factor;  /* LSCALE_GROWTH_FACTOR */
    double backoff_factor; /* LSCALE_BACKOFF_FACTOR */
    long growth_interval;  /* LSCALE_GROWTH_INTERVAL */
} lscale_params;

/* GradScaler's defaults, as above. */
lscale_params lscale_defaults(void);
/* A scaler at p's initial scale, tracker 0, nothing skipped. *out is the
 * caller's (lscale_free). Returns 0, or -1 out of memory. */
int lscale_new(lscale **out, const lscale_params *p);
void lscale_free(lscale *s); /* accepts NULL */

/* The scale for the next step, and 1/scale as GradScaler unscales with it
 * (float(1.0 / double(scale))). */
float lscale_scale(const lscale *s);
float lscale_inv(const lscale *s);
long lscale_growth_tracker(const lscale *s);
long lscale_skipped(const lscale *s); /* steps skipped so far */

/* After a step whose gradients held an inf or a NaN (found_inf != 0) or
 * not: the update above. Returns 1 when the step was skipped, else 0. */
int lscale_update(lscale *s, int found_inf);

/* A checkpoint's state back (scale > 0 and finite, tracker in [0, growth
 * interval), skipped >= 0). Returns 0, or -1 (nothing changed) when a value
 * is out of range. */
int lscale_restore(lscale *s, float scale, long growth_tracker, long skipped);

/* Test only (VITJOB_TEST_INJECT_OVERFLOW, documented in worker/README.md):
 * whether spec, a comma-separated list of 1-based optimizer steps each
 * optionally followed by @RANK ("3,5@1": step 3 on every rank, step 5 on
 * rank 1), names step `step` (1-based) on rank `rank`. The loop then seeds
 * that rank's first micro-batch's loss gradient with infinity, an overflow
 * as fp16 makes one. NULL or "" names nothing; a malformed entry names
 * nothing. */
int lscale_injected(const char *spec, long step, int rank);

#endif
