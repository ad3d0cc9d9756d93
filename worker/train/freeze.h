/* worker/train/freeze.h - training.freeze: which parameters a run freezes.
 *
 * Owns: matching training.freeze's prefixes against timm's parameter names
 * (a prefix matches a name equal to it or going on with a '.' after it:
 * "blocks.1" matches blocks.1.attn.qkv.weight, never blocks.10.*), the
 * errors of a freeze list (a prefix matching nothing, every parameter
 * frozen: VJ_ERR_CONFIG naming training.freeze), handing the result to the
 * model (model_set_frozen) with its one log line, and the runs of frozen
 * or trainable parameters within a range of the flat vector (what the
 * optimizer, the collectives and the checkpoint segments split on).
 * Must not: compute gradients (model.c skips them), hold optimizer state
 * (optim.c leaves frozen tensors out), or run collectives (dp*.c).
 */
#ifndef VITJOB_FREEZE_H
#define VITJOB_FREEZE_H

#include <stddef.h>

#include "config.h"
#include "exitcode.h"
#include "model.h"

/* 1 when prefix matches the parameter name: equal, or name continues
 * with '.' right after prefix. An empty prefix matches nothing. */
int freeze_match(const char *prefix, const char *name);

/* frozen[i] (n entries) = 1 when one of the n_prefixes prefixes matches
 * names[i], else 0. VJ_OK; VJ_ERR_CONFIG with a message naming
 * training.freeze when a prefix matches no name, or when every name is
 * frozen (nothing would train). */
vj_err freeze_resolve(const char *const *prefixes, int n_prefixes, const char *const *names,
                      int n, unsigned char *frozen, char *err, size_t errlen);

/* training.freeze against the parameters of the model mc describes,
 * without a model (model_tensor_names): the config check before any work.
 * VJ_OK, VJ_ERR_CONFIG as freeze_resolve, VJ_ERR_OUT_OF_MEMORY. */
vj_err freeze_check(const training_config *tc, const model_config *mc, char *err,
                    size_t errlen);

/* Freezes m's parameters that tc->freeze names (nothing without a list)
 * and, when log is set, logs event=freeze with the frozen and trainable
 * parameter counts. *n_frozen (may be NULL): the frozen parameter count.
 * VJ_OK, VJ_ERR_CONFIG (freeze_resolve), VJ_ERR_OUT_OF_MEMORY. */
vj_err freeze_model(vit_model *m, const training_config *tc, int log, size_t *n_frozen,
                    char *err, size_t errlen);

/* The model config a checkpoint records and a resume must match
 * (model_config_json), with tc's freeze list added as "freeze": an array
 * of the prefixes as given, or when that does not fit in len, a string
 * "fnv1a64:<16 hex digits>" of them (never a truncated JSON). Without a
 * list, model_config_json's text alone. So a run resumes only from
 * checkpoints written with the same freeze list, and is told both
 * otherwise. */
void freeze_model_json(const model_config *mc, const training_config *tc, char *out,
                       size_t len);

/* The runs of [lo, hi) of m's flat vector in which every parameter is
 * frozen (frozen = 1) or trainable (frozen = 0), in order: fills lo_out[k],
 * hi_out[k] for at most max runs and returns their count (0: none; the
 * count may exceed max, then only max are filled). At most
 * model_num_tensors(m) runs exist. Beyond the last tensor (padding) counts
 * as frozen. */
int freeze_runs(const vit_model *m, size_t lo, size_t hi, int frozen, size_t *lo_out,
                size_t *hi_out, int max);

#endif
