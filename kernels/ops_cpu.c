/* kernels/ops_cpu.c - the CPU backend's op table and thread control.
 * Owns: which function fills each slot of vit_ops for the CPU, and the
 * thread count of OpenBLAS and OpenMP. Must not: contain math. */
#include "ops.h"

#include <cblas.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* OpenBLAS's own API (declared in its cblas.h on Debian, repeated here so that
 * a CBLAS without it fails at link time, not silently). */
void openblas_set_num_threads(int num_threads);

int ops_cpu_set_threads(int n)
{
    if (n <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (int)cores : 1;
    }
    openblas_set_num_threads(n);
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    return n;
}

static const vit_ops cpu_ops = {
    .name = "cpu",
    .patchify = patchify_cpu,
    .matmul_forward = matmul_forward_cpu,
    .matmul_backward = matmul_backward_cpu,
    .embed_forward = embed_forward_cpu,
    .embed_backward = embed_backward_cpu,
    .layernorm_forward = layernorm_forward_cpu,
    .layernorm_backward = layernorm_backward_cpu,
    .attention_forward = attention_forward_cpu,
    .attention_backward = attention_backward_cpu,
    .gelu_forward = gelu_forward_cpu,
    .gelu_backward = gelu_backward_cpu,
    .zero = zero_cpu,
    .round_bf16 = round_bf16_cpu,
    .residual_forward = residual_forward_cpu,
    .gather_cls = gather_cls_cpu,
    .scatter_cls_backward = scatter_cls_backward_cpu,
    .crossentropy_forward = crossentropy_forward_cpu,
    .crossentropy_backward = crossentropy_backward_cpu,
    .sum_squares = sum_squares_cpu,
    .scale = scale_cpu,
    .adamw_update = adamw_update_cpu,
};

const vit_ops *ops_cpu(void) { return &cpu_ops; }
