/* worker/train/feed.h - the samples a run trains and evaluates on, whatever
 * data.format says, behind one interface for the training loop.
 *
 * Owns: choosing between Fashion-MNIST in memory (data.h: every rank reads
 * the global order and takes its part of each global batch) and the shard
 * loader (loader.h: webdataset shards or an image folder, each rank its
 * own units); sharing the loader's scan over the ranks (each rank counts
 * its shards, the counts are added over the communicator); the steps per
 * epoch and the total; the loader's options from the config (defaults of
 * data.mean/std, data.workers); the loader's position in a checkpoint
 * (every rank's, gathered, as a JSON array in the manifest); and the
 * data's warnings of what would surprise a user (no test set, fewer class
 * folders than classes, small images upscaled on the CPU with the run's
 * planned time).
 * Must not: run the model, or talk to storage other than through the data
 * modules.
 */
#ifndef VITJOB_FEED_H
#define VITJOB_FEED_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "config.h"
#include "dp.h"
#include "exitcode.h"
#include "ops.h"

typedef struct feed feed;

typedef struct {
    const vit_job_config *cfg;
    const vit_ops *ops;  /* the backend: the scan's counts are shared in its memory */
    comm *comm;          /* NULL alone */
    int rank, world;
    int threads;         /* training threads (data.workers' default is what they leave) */
} feed_options;

/* Loads Fashion-MNIST, or lists and scans the shards or the folder (all
 * ranks together). *out is the caller's (feed_free). */
vj_err feed_new(feed **out, const feed_options *o, char *err, size_t errlen);
/* data.workers' default beside `threads` training threads: the CPUs they
 * leave, at least 1 (also the planner's, worker/plan/plan_memory.h). */
int feed_default_workers(int threads);
void feed_free(feed *f); /* accepts NULL */

/* Training samples in the data set (an epoch's worth). */
uint64_t feed_train_samples(const feed *f);
/* Steps of epoch e (0: too few samples for one step). */
long feed_epoch_steps(feed *f, long epoch);
/* The steps of the first `epochs` epochs. */
long feed_total_steps(feed *f, long epochs);

/* Starts the training stream: at the beginning (meta_step < 0), or where a
 * checkpoint left it (epoch, index and the manifest's "loader", "" when it
 * has none; saved_world: the world size that wrote it). */
vj_err feed_start(feed *f, long meta_step, long epoch, long index, const char *loader_json,
                  int saved_world, char *err, size_t errlen);

/* One optimizer step of this rank: feed_step_begin, `accum` x feed_next
 * (one micro-batch each), feed_step_end. */
void feed_step_begin(feed *f);
vj_err feed_next(feed *f, float *images, int *labels, char *err, size_t errlen);
void feed_step_end(feed *f);
/* The position after the last completed step (epoch, and the index within
 * it: Fashion-MNIST's sample index, the loader's step). */
void feed_position(const feed *f, long *epoch, long *index);
/* Every rank's exact position, gathered through d, as the manifest's
 * "loader" JSON into buf (""  for Fashion-MNIST, or when it does not fit).
 * All ranks call it at the same step. */
vj_err feed_checkpoint_state(feed *f, dp *d, char *buf, size_t buflen, char *err,
                             size_t errlen);
/* Samples skipped as bad so far (this rank). */
uint64_t feed_skipped(const feed *f);
/* Seconds training waited for decoded samples (0 for Fashion-MNIST). */
double feed_wait_seconds(const feed *f);

/* Training on the CPU, rank 0: once the loader has upscaled an image 4x
 * or more in area (ld_upscaled), logs one warning (event=upscale) with
 * the run's planned time: step_s (the seconds a step has taken so far)
 * x steps_left, of total steps. Logs at most once; else does nothing. */
void feed_warn_upscale(feed *f, double step_s, long steps_left, long total);
/* That warning's msg= text into msg: the stored size w x h against
 * model.imageSize `size`, the area factor, and the planned time. */
void feed_upscale_message(char *msg, size_t len, int w, int h, int size, double step_s,
                          long steps_left, long total);

/* Evaluation: whether there is a test split; then one pass of batches. The
 * number of forward passes (*batches) is the same on every rank. */
int feed_has_test(const feed *f);
uint64_t feed_test_samples(const feed *f);
vj_err feed_eval_begin(feed *f, long *batches, char *err, size_t errlen);
/* Up to a micro-batch of this rank's test samples; *n how many (0 when its
 * part has run out: the caller still runs a forward pass to keep the
 * ranks in step). */
vj_err feed_eval_next(feed *f, float *images, int *labels, int *n, char *err, size_t errlen);
void feed_eval_end(feed *f);

#endif
