/* worker/ckpt/ckpt.h - checkpoints: what a step's checkpoint holds, writing it
 * in the background, and finding and reading the newest good one.
 *
 * Owns: the layout of docs/design.md (<root>/step-<9 digits>/shard-<r>-of-<w>.bin,
 * one per rank, then manifest.json, written by rank 0 last, once every
 * rank's shard is stored; a writer generation g > 0 adds ".g<g>" to both
 * names, ckpt_fence.h, and the newest generation's manifest speaks for a
 * step), the shard format (a rank's segments of the flat
 * parameter vector: their fp32 parameters, then AdamW m, then v, then, with
 * training.ema, the EMA of the weights; little-endian), the manifest (model
 * config, step, the run's total steps, data-loader position, world size,
 * sharding, whether the shards hold an EMA, per shard its segments, bytes
 * and a CRC-32 per MiB block), retention (checkpoint.keep newest complete
 * steps; older ones are deleted only after a newer manifest exists) and
 * verification (a step without a manifest, or whose shard blocks do not
 * match their CRCs, does not exist for resume).
 * Must not: know the model, the optimizer or the collectives beyond the
 * segments and buffers it is handed; block training on storage (the
 * upload runs on its own thread from a host copy).
 */
#ifndef VITJOB_CKPT_H
#define VITJOB_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ckpt_store.h"
#include "exitcode.h"
#include "ops.h"
#include "rdzv.h"

#define CKPT_BLOCK_BYTES (1u << 20) /* a CRC per MiB of a shard */

/* What a checkpoint says besides the tensors. */
typedef struct {
    long step;            /* optimizer steps done */
    long total_steps;     /* the steps the run that wrote it was planned for (its learning-
                           * rate schedule's length; the manifest's "totalSteps"); 0:
                           * unknown (not written, or a step from before the key) */
    long epoch, index;    /* the data loader's position after them */
    long images_done;
    int world_size;
    char sharding[16];
    size_t n_params;
    char model[512];      /* the model config as JSON (model_io's dims): must match to load */
    int ema;              /* 1: every shard holds a fourth array, the EMA of its segments'
                           * weights (the manifest's "ema": true; absent in older steps) */
    /* fp16-mixed's loss scaler (worker/train/loss_scale.h), the same on
     * every rank: the manifest's "lossScaler" {"scale", "growthTracker",
     * "skippedSteps"}; loss_scale 0: none (other precisions, older steps) */
    double loss_scale;
    long scale_growth_tracker, skipped_steps;
    /* the writer generation of the manifest (its "generation"; absent in
     * steps written before fencing: 0). Set by the reader; ckpt_save writes
     * the writer's own (ckpt_writer_set_generation), whatever this says. */
    long generation;
    /* "" or the data loader's per-rank positions as a JSON array (the
     * manifest's "loader"; the train module's format): shards and image
     * folders resume to the sample from it */
    char loader[65536];
} ckpt_meta;

/* A range [lo, hi) of the flat vector a rank saves, with where its
 * parameters, AdamW m and v (NULL: saved as zeros, a parameter without
 * state), and EMA (read when the meta says ema; else may be NULL) are
 * (backend memory, read through ops). */
typedef struct {
    size_t lo, hi;
    const float *params, *m, *v, *ema;
} ckpt_segment;

typedef struct ckpt_writer ckpt_writer;

/* A writer for this rank of world into store (borrowed; used only by the
 * writer's thread while a save is in flight). r: the rendezvous store
 * through which rank 0 learns that every shard is stored (borrowed; NULL
 * with one rank). keep: checkpoint.keep. timeout_s bounds rank 0's wait
 * for the other ranks' shards. */
int ckpt_writer_new(ckpt_writer **out, ckpt_store *store, rdzv *r, int rank, int world, int keep,
                    double timeout_s, char *err, size_t errlen);
/* The writer generation (ckpt_fence.h; ckpt_resume's *generation) in the
 * names of everything it writes and in its manifests; 0 until set. Before
 * every put and every delete the writer checks the fence: a newer
 * generation's fails the save with CKPT_FENCED (nothing written or
 * deleted), and retention deletes no object of a newer generation. */
void ckpt_writer_set_generation(ckpt_writer *w, long generation);
/* may_write(ctx), when set, is asked with the fence right before each
 * object becomes visible (a shard's or manifest's rename): 0 = this process
 * must write nothing more (e.g. the heartbeat's hb_ok: woken from a freeze),
 * and the save fails with CKPT_FENCED. ctx is borrowed. */
void ckpt_writer_set_gate(ckpt_writer *w, int (*may_write)(const void *ctx), const void *ctx);
/* Waits for a save in flight, then frees. Accepts NULL. */
void ckpt_writer_free(ckpt_writer *w);
/* Starts saving: waits for the previous save (failing with its error if
 * it failed), copies the segments to host memory (the only time training
 * waits), and returns while a thread stores the shard and, on rank 0, the
 * manifest and the retention. 0, or a ckpt_status with a message. */
ckpt_status ckpt_save(ckpt_writer *w, const ckpt_meta *meta, const ckpt_segment *segs, int n,
                      const vit_ops *ops, char *err, size_t errlen);
/* Waits for the save in flight: 0, or its failure. *copy_s (may be NULL):
 * the seconds the last save's host copy took. */
ckpt_status ckpt_wait(ckpt_writer *w, double *copy_s, char *err, size_t errlen);

/* The seconds the last ckpt_save spent copying to host memory (known as
 * soon as it returns; the rest of its time was waiting for the save
 * before it). */
double ckpt_copy_seconds(const ckpt_writer *w);
/* Rank 0: the newest step this writer has stored completely (its manifest
 * written), -1 before the first; read from any thread at any time, without
 * waiting for a save in flight. NULL w: -1. */
long ckpt_stored_step(ckpt_writer *w);
/* A parsed manifest (opaque). */
typedef struct ckpt_manifest ckpt_manifest;
void ckpt_manifest_free(ckpt_manifest *m);
const ckpt_meta *ckpt_manifest_meta(const ckpt_manifest *m);

/* The newest step under store whose manifest parses and whose shards all
 * match their CRCs (every block is read), falling back to older steps
 * with a log line saying why each newer one was passed over. CKPT_NOT_FOUND
 * when there is none (a fresh start). *out is the caller's. */
ckpt_status ckpt_find(ckpt_store *store, ckpt_manifest **out, char *err, size_t errlen);
/* A resume's first half: the newest step older than below (LONG_MAX: any)
 * whose manifest parses and whose shards are all present with the sizes it
 * says, from the listing alone; torn steps are passed over with a log line.
 * No block is read: ckpt_read_range checks each block it reads, and the
 * ranks of a resume read every block among them, so they load and verify in
 * one pass and, if any rank finds a block corrupt, all try the step before
 * (ckpt_resume). CKPT_NOT_FOUND when there is none. *out is the caller's. */
ckpt_status ckpt_find_candidate(ckpt_store *store, long below, ckpt_manifest **out, char *err,
                                size_t errlen);
/* The manifest of one step: of the newest generation that has one there
 * (the step's folder is listed). */
ckpt_status ckpt_read_step(ckpt_store *store, long step, ckpt_manifest **out, char *err,
                           size_t errlen);
/* The manifest of one step written by generation gen (rank 0 found it;
 * the others read that one). */
ckpt_status ckpt_read_manifest(ckpt_store *store, long step, long gen, ckpt_manifest **out,
                               char *err, size_t errlen);
/* Reads [lo, hi) of the flat vector from the step's shards, whatever
 * world size wrote them, into params, m and v (host memory, hi - lo floats
 * each; any may be NULL), checking the CRC of every block it touches: a
 * block that does not match is CKPT_PERMANENT with err saying "corrupt". */
ckpt_status ckpt_read_range(ckpt_store *store, const ckpt_manifest *man, size_t lo, size_t hi,
                            float *params, float *m, float *v, char *err, size_t errlen);
/* The same for the EMA (hi - lo floats of host memory), of a step whose
 * meta says ema; another step is CKPT_PERMANENT, err saying it has none. */
ckpt_status ckpt_read_ema(ckpt_store *store, const ckpt_manifest *man, size_t lo, size_t hi,
                          float *ema, char *err, size_t errlen);

/* The name of a step's folder under the checkpoint root: "step-<9 digits>"
 * (docs/design.md). */
void ckpt_step_name(long step, char *out, size_t len);

/* A rank's load of one step during ckpt_resume: reads what this rank needs
 * with ckpt_read_range (which checks every block it touches) into its own
 * state. CKPT_OK, CKPT_PERMANENT for a corrupt block (the ranks then pass
 * the step over), CKPT_RETRY when storage or memory fails now. */
typedef ckpt_status (*ckpt_loader)(void *ctx, ckpt_store *store, const ckpt_manifest *man,
                                   char *err, size_t errlen);

typedef struct {
    ckpt_store *store;      /* borrowed */
    rdzv *r;                /* the ranks agree through it (borrowed; NULL with one rank) */
    int rank, world;
    double timeout_s;       /* each wait for another rank */
    const char *uri;        /* checkpoint.uri, for messages */
    const char *model_json; /* this run's model (model_config_json): a step must match */
    size_t n_params;
    ckpt_loader load;
    void *ctx;              /* load's */
    long restart;           /* VITJOB_RESTART (0 alone): rank 0 enters the fence with it
                             * (ckpt_fence_enter) before it reads anything */
    long *generation;       /* NULL, or set to the writer generation every rank then
                             * writes as (ckpt_writer_set_generation) */
} ckpt_resume_options;

/* A resume: rank 0 enters the generation fence (o->restart; nothing is
 * read before), then picks the newest step whose objects are all there
 * (ckpt_find_candidate) and tells the others through the rendezvous store;
 * every rank loads its part with o->load, checking each block's CRC as it
 * reads (the ranks together read every block), so the state is read once;
 * every rank posts its outcome and reads everyone's, so that all decide
 * alike: if any rank found a block corrupt, all pass the step over (rank 0
 * logs why) and take the one before; if storage failed, all stop. *meta is
 * the step loaded, or step -1 for a fresh start (no complete checkpoint).
 * Returns VJ_OK, VJ_ERR_CONFIG (a step of another model), VJ_ERR_RENDEZVOUS,
 * or ckpt_status_class of the store's failure, with the message in err. */
vj_err ckpt_resume(const ckpt_resume_options *o, ckpt_meta *meta, char *err, size_t errlen);

/* The exit class of a store's failure: retried (VJ_ERR_IO) for what may
 * pass, VJ_ERR_OUTPUT for what will not, VJ_ERR_RENDEZVOUS (retried: this
 * process is of an older generation) for CKPT_FENCED. */
vj_err ckpt_status_class(ckpt_status st);

/* One line per step under store: its state (complete, torn: no manifest
 * or a shard missing, corrupt: why), for `vitjob-worker checkpoints`.
 * Writes to out; returns 0 or a ckpt_status. */
ckpt_status ckpt_describe(ckpt_store *store, FILE *out, char *err, size_t errlen);

#endif
