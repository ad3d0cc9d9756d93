/* worker/train/model_init.h - model.init: where a run's first weights come
 * from when they are not random.
 *
 * Owns: resolving model.init into named tensors and handing them to
 * model_load_tensors with the run's adaptations (model.initHead,
 * training.seed). model.init is
 *  - a safetensors file with timm's names: a path, file:///abs/path, or
 *    s3://bucket/key (read whole through ckpt_store, with
 *    checkpoint.endpoint and the AWS_* credentials of the environment);
 *  - a checkpoint: its root (the newest complete step, every block's CRC
 *    checked) or one step-N folder, local (a directory, or file://) or on
 *    S3; its manifest's model gives the layout of the flat vector.
 * A local path is a checkpoint when it is a directory; an s3:// URI is a
 * file when an object of that name exists, else a checkpoint.
 * Must not: adapt tensors (model_io.c), or reach storage except through
 * worker/ckpt (ckpt_store, ckpt, safetensors).
 */
#ifndef VITJOB_MODEL_INIT_H
#define VITJOB_MODEL_INIT_H

#include <stddef.h>

#include "exitcode.h"
#include "model.h"
#include "model_io.h"

typedef struct {
    const char *uri;         /* model.init */
    const char *endpoint;    /* checkpoint.endpoint: S3-compatible servers; "" = AWS */
    model_load_options load; /* model.initHead, training.seed */
} model_init_options;

/* Loads m's parameters from o->uri, adapted (model_load_tensors), and logs
 * event=init_loaded with where they came from. Returns VJ_OK;
 * VJ_ERR_INIT_WEIGHTS when the weights are missing, unreadable, malformed
 * or do not fit (the message names model.init's value, and the tensor or
 * key); VJ_ERR_IO when S3 or the disk fails in a way that may pass. */
vj_err model_init_load(vit_model *m, const model_init_options *o, char *err, size_t errlen);

#endif
