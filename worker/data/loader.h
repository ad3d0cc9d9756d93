/* worker/data/loader.h - one rank's samples of webdataset shards or an image
 * folder: listed, counted, split over the ranks, shuffled, decoded and
 * transformed on threads, and resumable to the sample.
 *
 * Owns: the data set's index (ld_index: the shards of a brace pattern or a
 * prefix, with their sample counts; or the files of an ImageFolder with
 * their labels), the split over ranks (rank r of W takes units r, r+W, ...
 * of the epoch's order), the per-epoch order (seeded), the shuffle buffer,
 * the steps of an epoch (the same on every rank), the decode threads and
 * the bounded queue of ready samples, the bad-sample accounting, and the
 * position a checkpoint saves. The index, its scan and the order of its
 * units are loader_index.c's; the stream over them, its threads and its
 * position loader.c's (loader_index.h: what the one lends the other).
 * Must not: talk to other ranks (the caller shares the scan's counts and
 * the positions through its communicator), know the model, or include
 * anything of the worker outside data/.
 *
 * Units: a webdataset unit is a shard (a tar: the samples of webdataset's
 * key convention, wds.h); an imagefolder unit is one image file.
 *
 * Order of one rank in epoch e (training): the units are permuted from
 * (seed, e) (webdataset: the shard list; imagefolder: every file), and
 * rank r takes positions r, r+W, ... of it. Its samples, in the order the
 * units hold them, are cut into blocks of data.shuffleBuffer samples
 * (imagefolder: blocks of 1: the permutation is already a full shuffle);
 * each block is emitted in a permutation drawn from (seed, e, rank, block).
 * This is a shuffle buffer that can be resumed from one block's start
 * without replaying the epoch (webdataset's own buffer is a reservoir,
 * whose state is its whole content). Every draw of an augmentation comes
 * from (seed, epoch, the sample's key), never from thread timing.
 *
 * Steps of an epoch: with n_r(e) the samples of rank r's units in epoch e,
 * every rank runs floor(floor(min_r n_r(e) * (1 - maxBadFraction)) / P)
 * steps of P samples each, so that all ranks end an epoch together, and a
 * rank runs short only when more than maxBadFraction of its samples are bad.
 *
 * Bad samples: a sample the reader cannot make an image and a label of (no
 * image, no label, an unknown extension, a corrupt or truncated image) is
 * skipped: counted (per unit, and in total), logged once per unit with
 * its first key, never fatal until the bad samples of this rank's epoch
 * exceed maxBadFraction of n_r(e): then VJ_ERR_DATA naming the worst unit.
 * A unit that is missing, not a tar, or holds a label >= numClasses, and
 * an empty data set, are VJ_ERR_DATA at the scan, before training.
 */
#ifndef VITJOB_LOADER_H
#define VITJOB_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "erasing.h"
#include "randaug.h"
#include "transform.h"

typedef enum { LD_WEBDATASET, LD_IMAGEFOLDER } ld_kind;

/* ---- the index ---- */

typedef struct ld_index ld_index;

typedef struct {
    ld_kind kind;
    const char *uri;      /* webdataset: a brace pattern or a prefix (".../" or a
                           * directory) whose .tar objects are listed; imagefolder:
                           * the root folder (path or file://) */
    const char *key;      /* the config key uri came from ("data.uri"), for messages */
    const char *endpoint; /* S3 endpoint ("" = AWS) */
    int num_classes;      /* labels must be below it */
    uint64_t max_member;  /* largest tar member accepted, bytes (0 = 256 MiB) */
    int eval;             /* an evaluation split: fewer shards than ranks is allowed (a rank
                           * without any evaluates nothing), unlike training's */
} ld_index_options;

/* Lists the data set (no sample is read yet). *out is the caller's
 * (ld_index_free). Returns 0, or VJ_ERR_DATA / VJ_ERR_OUT_OF_MEMORY /
 * VJ_ERR_CONFIG with a message naming the URI. */
int ld_index_new(ld_index **out, const ld_index_options *o, char *err, size_t errlen);
void ld_index_free(ld_index *ix); /* accepts NULL */
size_t ld_index_units(const ld_index *ix);
const char *ld_index_unit(const ld_index *ix, size_t i); /* borrowed */
/* imagefolder: the class names in label order (n of them); NULL for webdataset. */
const char *const *ld_index_classes(const ld_index *ix, int *n);

/* Counts the samples of the units this rank scans (i % world == rank),
 * reading them with `threads` threads: counts[i] for those, the others left
 * as they are (the caller sums the ranks' arrays, zeroed first). A
 * webdataset shard is read whole (without decoding) and its labels
 * checked; an image file counts 1. Returns 0, or VJ_ERR_DATA with a message
 * naming the unit (and key). */
int ld_index_scan(ld_index *ix, int rank, int world, int threads, double *counts, char *err,
                  size_t errlen);
/* Every unit's count (the ranks' scans added up). Returns 0, or VJ_ERR_DATA
 * when the data set is empty. */
int ld_index_set_counts(ld_index *ix, const double *counts, char *err, size_t errlen);
uint64_t ld_index_samples(const ld_index *ix);

/* ---- the loader ---- */

typedef struct ld_loader ld_loader;

typedef struct {
    const ld_index *ix;      /* borrowed, counts set */
    const char *endpoint;    /* S3 endpoint */
    int rank, world;
    uint64_t seed;
    int train;               /* 1: epochs of shuffled, drop-last steps; 0: one pass
                              * over this rank's units in index order (evaluation) */
    int augment;             /* train: RandomResizedCrop + flip; else the eval transform */
    int batch;               /* samples per ld_next (the micro-batch) */
    int per_step;            /* train: samples per step on this rank (batch x accumulation) */
    xf_params xf;            /* out_size, channels, interp, mean, std (copied) */
    double scale[2], ratio[2];
    randaug_spec randaug;    /* train + augment: timm's RandAugment on the 8-bit crop after the
                              * flip (enabled 0: off); ra: its fill and filter */
    ra_params ra;
    er_params erasing;       /* train + augment: random erasing of the normalised image
                              * (probability 0: off); both draw from the crop's stream */
    double crop_pct;
    int workers;             /* decode threads (>= 1) */
    int prefetch_batches;    /* ready batches queued ahead (>= 1) */
    int shuffle_buffer;      /* samples per shuffled block (>= 1) */
    uint64_t max_pixels;
    double max_bad_fraction;
    int note_upscale;        /* training on the CPU: note the first stored image upscaled
                              * 4x or more in area to out_size (ld_upscaled) */
} ld_options;

/* Where a rank's training stream stands after a step: what a checkpoint
 * saves per rank and ld_start continues from. */
typedef struct {
    long epoch, step;        /* step: completed steps of this epoch */
    int64_t consumed;        /* samples of the epoch's stream taken (bad ones too) */
    int64_t block_first;     /* the stream index where the current block starts */
    int64_t unit;            /* that block's first sample: which of the rank's units
                              * (position in this epoch's list of them) */
    int64_t offset;          /* and the byte where it starts in that unit */
} ld_position;
#define LD_POSITION_FIELDS 6

/* A loader; no thread runs yet. *out is the caller's (ld_free). */
int ld_new(ld_loader **out, const ld_options *o, char *err, size_t errlen);
/* Stops the threads and frees. Accepts NULL. */
void ld_free(ld_loader *l);
/* The host bytes of a training loader's queue of decoded samples (its ring,
 * batch samples per ld_next, out_size x out_size x channels floats each):
 * what ld_new allocates for them, for the planner. */
size_t ld_queue_bytes(int batch, int prefetch_batches, int workers, int channels, int out_size);

/* The steps of epoch e (the same on every rank; 0: an epoch too small for
 * one step of every rank). */
long ld_epoch_steps(const ld_loader *l, long epoch);
/* This rank's samples in the evaluation pass, and the most any rank has. */
int64_t ld_eval_samples(const ld_loader *l, int64_t *max_over_ranks);

/* Starts the threads: at the beginning (p NULL), or at a position saved by
 * this same world size (exact = 1 and p->unit >= 0), or otherwise at
 * (p->epoch, p->step) re-derived by skipping step x per_step samples of the
 * new stream without decoding them. */
int ld_start(ld_loader *l, const ld_position *p, int exact, char *err, size_t errlen);

/* Training: the next `batch` samples into images (batch x C x S x S floats)
 * and labels. Evaluation: up to `batch`; *n how many (0: the pass ended).
 * Returns 0, or VJ_ERR_DATA (too many bad samples; a shard that failed
 * mid-read), VJ_ERR_IO (the storage failed after retries) with err. */
int ld_next(ld_loader *l, float *images, int *labels, int *n, char *err, size_t errlen);
/* Training: a step ended (call after each optimizer step's batches). */
void ld_step_done(ld_loader *l);
/* Training: the position after the last ld_step_done. */
ld_position ld_position_now(const ld_loader *l);

typedef struct {
    uint64_t samples, skipped; /* taken so far (good), skipped as bad */
    double wait_seconds;       /* time ld_next waited for decoded samples */
} ld_stats;
ld_stats ld_stats_now(const ld_loader *l);
/* With o.note_upscale: 1 once a decoded image was upscaled 4x or more in
 * area to out_size, with the first such image's stored size in *w x *h;
 * else 0. Any thread. */
int ld_upscaled(const ld_loader *l, int *w, int *h);

#endif
