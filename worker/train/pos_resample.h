/* worker/train/pos_resample.h - a grid of position embeddings resampled to
 * another grid, as timm's resample_abs_pos_embed does when a pretrained ViT
 * is finetuned at another image size.
 *
 * Owns: the resampling arithmetic of torch.nn.functional.interpolate(
 * mode="bicubic", antialias=True, align_corners=False) on a (1, D, h, w)
 * float tensor: separable, per output index i of an axis of in -> out
 * samples, scale = in/out, centre = scale*(i+0.5), support = 2*max(scale, 1),
 * the taps [trunc(centre-support+0.5), trunc(centre+support+0.5)) clamped to
 * the input, each weighted by the Keys cubic (a = -0.5, as torch's and PIL's
 * antialiased path) of (tap+0.5-centre)/max(scale, 1), the weights
 * normalised to sum 1; rows first, then columns; computed in double.
 * Must not: know tensor names, the class token (the caller leaves it out),
 * or files.
 */
#ifndef VITJOB_POS_RESAMPLE_H
#define VITJOB_POS_RESAMPLE_H

#include <stddef.h>

/* src holds h x w tokens of D values each, token-major as timm's pos_embed
 * stores them without its class token (src[(y*w + x)*D + d]); dst receives
 * nh x nw tokens laid out the same way (nh*nw*D floats). All sizes >= 1.
 * Returns 0, or -1 when host memory for the intermediate grid runs out
 * (dst is then unchanged). */
int pos_resample_bicubic_aa(const float *src, int h, int w, int D, float *dst, int nh, int nw);

#endif
