/* worker/train/model_io.h - the model's weights in safetensors files, by timm name.
 *
 * Owns: the mapping between the flat parameter buffer and a safetensors file
 * with timm's names and shapes (so timm's VisionTransformer loads it
 * unchanged), the checks on weights given as model.init, and timm's
 * adaptations of them when finetuning (a new head, a resampled pos_embed;
 * model_load_tensors).
 * Must not: change the layout (model.c owns it), or find the weights
 * (model_init.c resolves model.init to tensors).
 */
#ifndef VITJOB_MODEL_IO_H
#define VITJOB_MODEL_IO_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "safetensors.h"

/* The model's dims as one line of JSON (the safetensors metadata
 * "vitjob.model" and a checkpoint's "model"): equal configs give equal text. */
void model_config_json(const model_config *mc, char *out, size_t len);

/* Writes every parameter (F32) and the model config as metadata. Returns 0 or
 * -1 with a message naming the path in err. */
int model_save_safetensors(vit_model *m, const model_config *mc, const char *path, char *err,
                           size_t errlen);

/* Loads every parameter from a file that has exactly the model's tensors
 * (names, shapes, F32), each once (st_open refuses a name given twice), and
 * only finite values. Missing, extra, mis-shaped or non-F32 tensors are
 * errors naming the tensor (and its dtype or shapes against the model's);
 * a NaN or Inf names the tensor and the first such element's index. The
 * model is unchanged unless every tensor checks out. Returns 0 or -1 with
 * a message in err. */
int model_load_safetensors(vit_model *m, const char *path, char *err, size_t errlen);

/* How model_load_tensors adapts what does not fit, as timm does when it
 * loads pretrained weights into a model of another class count or image
 * size (its load_pretrained and checkpoint_filter_fn). */
typedef struct {
    init_head_mode head; /* model.initHead */
    uint64_t seed;       /* training.seed: a new head's init (model_new_head_init) */
} model_load_options;

/* Loads the model's parameters from n named tensors (st_tensor: name,
 * dtype, shape, data, borrowed), with every check of model_load_safetensors;
 * `origin` names them in messages (a file, an s3:// URI, a checkpoint step).
 * With o == NULL every tensor must fit exactly. With o, as timm:
 *  - head: head.weight and head.bias of another class count (the same
 *    width), or neither, give a new head (model_new_head_init), or with
 *    INIT_HEAD_KEEP an error naming model.initHead and both class counts;
 *  - pos_embed [1, 1+g*g, D] of another grid: the class token kept, the
 *    g x g grid resampled to the model's (pos_resample.h); a token count
 *    that is not 1 + a square is an error naming it;
 *  - patch_embed.proj.weight with another kernel (patch size): an error
 *    naming both sizes (timm could resample it; this engine does not).
 * Each adaptation is logged (event=init_adapted, one line per tensor) once
 * the load has succeeded; the model is unchanged unless it succeeds.
 * Returns 0 or -1 with a message naming origin in err. */
int model_load_tensors(vit_model *m, const st_tensor *ts, int n, const char *origin,
                       const model_load_options *o, char *err, size_t errlen);

/* A new ViT head as timm initialises one (init_weights_vit_timm, weight_init
 * ''): weight (num_classes x dim) trunc_normal_(std=0.02) with timm's
 * absolute bounds [-2, 2] (at std 0.02 a plain normal), bias zeros;
 * deterministic in seed (and the class count). */
void model_new_head_init(float *weight, float *bias, int num_classes, int dim, uint64_t seed);

#endif
