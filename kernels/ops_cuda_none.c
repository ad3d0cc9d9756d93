/* kernels/ops_cuda_none.c - ops_cuda() for builds without nvcc.
 * Owns: saying, in one line, that this build has no CUDA backend.
 * Must not: be compiled into a build that has kernels/ops_cuda.cu (the
 * Makefile defines VITJOB_WITH_CUDA there and this file is then empty). */
#include "ops.h"

#include <stdio.h>

#ifndef VITJOB_WITH_CUDA
const vit_ops *ops_cuda(int bf16, char *err, size_t errlen)
{
    (void)bf16;
    snprintf(err, errlen, "this build has no CUDA backend (nvcc was not found when it was built)");
    return NULL;
}

size_t ops_cuda_peak_bytes(void) { return 0; }
#else
typedef int ops_cuda_none_unused; /* ISO C: a translation unit is never empty */
#endif
