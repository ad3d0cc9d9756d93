/* worker/train/layer_decay.h - BEiT's layer-wise learning-rate decay with
 * timm's parameter groups (timm.optim param_groups_layer_decay over
 * VisionTransformer.group_matcher(coarse=False)).
 *
 * Owns: the layer of each timm parameter name and its lr scale:
 * cls_token, pos_embed and patch_embed.* are layer 0; blocks.i.* layer i+1;
 * norm.* joins the last block (timm's matcher gives ^norm the ordinal
 * MATCH_PREV_GROUP), layer depth; anything else (head.*) the last layer,
 * depth+1. The scale of layer l is decay^(depth+1-l): 1 for the head.
 * Must not: know the optimizer's arithmetic or the weight-decay groups
 * (model.h's per-tensor flag; timm's rule there is the same: no decay for
 * 1-D tensors, cls_token and pos_embed).
 */
#ifndef VITJOB_LAYER_DECAY_H
#define VITJOB_LAYER_DECAY_H

/* The layer (0 .. depth+1) of the parameter called name in a model of
 * depth blocks. */
int layer_decay_layer(const char *name, int depth);

/* The lr scale of that parameter: decay^(depth+1-layer), or 1 when decay
 * is 0 (off). */
double layer_decay_scale(const char *name, int depth, double decay);

/* The depth of a model with these parameter names: 1 + the largest i of
 * a blocks.i.* name (0 without one). */
int layer_decay_depth(const char *const *names, int n);

#endif
