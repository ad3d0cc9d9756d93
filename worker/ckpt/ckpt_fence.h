/* worker/ckpt/ckpt_fence.h - checkpoint fencing by writer generation: a
 * process of an older generation (a pod frozen or partitioned while its
 * replacement took over) can never write or delete the checkpoint objects
 * that a newer generation relies on (docs/design.md, Checkpoints).
 *
 * Owns: the generation in object names (generation 0 keeps the names of
 * the layout before fencing, so every older checkpoint reads as generation
 * 0: "manifest.json", "shard-00000-of-00002.bin"; generation g > 0 adds
 * ".g<g>": "manifest.g3.json", "shard-00000-of-00002.g3.bin"), the fence
 * objects ("fence/g<g>.json", one per generation that took the checkpoints
 * over), picking a starting writer's generation, and the check a writer
 * makes before every put and every delete and again after every put
 * (refused, with one log line event=fenced naming both generations, when
 * a newer fence exists), and the test hold between a check and its act.
 * Must not: know what a checkpoint holds or decide what to delete
 * (worker/ckpt/ckpt_writer.c); write anything but fence objects.
 */
#ifndef VITJOB_CKPT_FENCE_H
#define VITJOB_CKPT_FENCE_H

#include <stddef.h>

#include "ckpt_store.h"

#define CKPT_FENCE_DIR "fence" /* the fences' folder under the checkpoint root */

/* A step's manifest of generation gen: "manifest.json" (0) or
 * "manifest.g<gen>.json". */
void ckpt_manifest_name(long gen, char *out, size_t len);
/* Rank rank of world's shard of generation gen: "shard-00001-of-00002.bin"
 * (0) or "shard-00001-of-00002.g<gen>.bin". */
void ckpt_shard_name(int rank, int world, long gen, char *out, size_t len);

typedef enum { CKPT_OBJ_OTHER = 0, CKPT_OBJ_MANIFEST, CKPT_OBJ_SHARD } ckpt_obj_kind;
/* What an object in a step's folder is, from its name in the folder (no
 * folder part), and *gen its generation (0 for an OTHER). */
ckpt_obj_kind ckpt_object_kind(const char *base, long *gen);

/* The newest generation that has a fence under the store: *newest, -1
 * when none. */
ckpt_status ckpt_fence_newest(ckpt_store *s, long *newest, char *err, size_t errlen);

/* A writer's start (rank 0, before the resume reads anything): its
 * generation *gen is restart (VITJOB_RESTART) unless the store already
 * holds a fence of restart or newer (another job, or a local run, used
 * this checkpoint.uri before), then one above the newest fence (logged,
 * event=fence_rebased). It records itself with a fence object unless it is
 * generation 0 and no fence exists (no older writer to exclude: local runs
 * leave the layout as before). CKPT_FENCED (logged, event=fenced) when,
 * after recording, a still newer fence is there. */
ckpt_status ckpt_fence_enter(ckpt_store *s, long restart, long *gen, char *err, size_t errlen);

/* Before a writer of generation gen puts or deletes anything (action:
 * "shard", "manifest", "retention", for the log; step: the step it
 * touches): CKPT_OK, or CKPT_FENCED when a newer generation's fence
 * exists, with one log line event=fenced generation=<gen>
 * newer_generation=<g> in_flight=0 and err saying that this process is of
 * an older generation, that this operation was refused and that it stores
 * and deletes nothing more. A store that fails is its ckpt_status (the
 * writer does not write unchecked). */
ckpt_status ckpt_fence_check(ckpt_store *s, long gen, const char *action, long step, char *err,
                             size_t errlen);
/* The same question asked again once a put is done (ckpt_store_put_guarded's
 * second one): CKPT_FENCED (logged with in_flight=1, err saying that the
 * newer generation took over while the operation was in flight) means the
 * fence appeared between the check and the act, and the writer takes its
 * object back. */
ckpt_status ckpt_fence_recheck(ckpt_store *s, long gen, const char *action, long step,
                               char *err, size_t errlen);

/* Tests only: the moment between a check that passed and its act (the
 * writers call ckpt_fence_hold(action, step) right there), where a test
 * makes a newer generation take over deterministically. A function set
 * with ckpt_fence_set_hold (NULL: none; not thread-safe, set it before the
 * writers start) is called there; without one, the environment variable
 * VITJOB_TEST_FENCE_HOLD="ACTION:STEP:FIFO" makes that action at that step
 * log event=fence_hold, open FIFO for reading (blocking until the test
 * opens it to write) and read a line, then log event=fence_released. Unset
 * (always, outside tests) it costs one getenv. */
#define CKPT_FENCE_HOLD_ENV "VITJOB_TEST_FENCE_HOLD"
void ckpt_fence_set_hold(void (*fn)(const char *action, long step, void *ctx), void *ctx);
void ckpt_fence_hold(const char *action, long step);

#endif
