/* worker/train/model_io.h - the model's weights in safetensors files, by timm name.
 *
 * Owns: the mapping between the flat parameter buffer and a safetensors file
 * with timm's names and shapes (so timm's VisionTransformer loads it
 * unchanged), and the checks on a file given as model.init.
 * Must not: change the layout (model.c owns it).
 */
#ifndef VITJOB_MODEL_IO_H
#define VITJOB_MODEL_IO_H

#include <stddef.h>

#include "model.h"

/* Writes every parameter (F32) and the model config as metadata. Returns 0 or
 * -1 with a message naming the path in err. */
/* The model's dims as one line of JSON (the safetensors metadata
 * "vitjob.model" and a checkpoint's "model"): equal configs give equal text. */
void model_config_json(const model_config *mc, char *out, size_t len);

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

#endif
