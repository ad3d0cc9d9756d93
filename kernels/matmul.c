/* kernels/matmul.c - CPU reference: linear layers through CBLAS (OpenBLAS).
 * Owns: out = inp @ w^T + bias and its backward, PyTorch's nn.Linear layout.
 * Must not: hand-roll a GEMM; OpenBLAS does that. */
#include "ops.h"

#include <cblas.h>
#include <string.h>

// inp (N,IC), w (OC,IC), bias (OC) -> out (N,OC)
void matmul_forward_cpu(float *out, const float *inp, const float *w, const float *bias,
                        int N, int IC, int OC)
{
    if (bias) {
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, sizeof(float) * OC);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC,
                bias ? 1.0f : 0.0f, out, OC);
}

// res (N,OC), inp (N,IC), w (OC,IC), bias (OC) -> out (N,OC) = res + inp @ w^T + bias
void matmul_forward_residual_cpu(float *out, const float *inp, const float *w,
                                 const float *bias, const float *res, int N, int IC, int OC)
{
    if (out != res) memcpy(out, res, sizeof(float) * (size_t)N * OC);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC, 1.0f,
                out, OC);
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float *row = out + (size_t)n * OC;
            for (int o = 0; o < OC; o++) row[o] += bias[o];
        }
    }
}

// dout (N,OC) -> dinp (N,IC) overwritten, dw (OC,IC) +=, dbias (OC) += (each skipped if NULL)
void matmul_backward_cpu(float *dinp, float *dw, float *dbias, const float *dout,
                         const float *inp, const float *w, int N, int IC, int OC)
{
    if (dinp) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w,
                    IC, 0.0f, dinp, IC);
    }
    if (dw) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC,
                    1.0f, dw, IC);
    }
    if (dbias) {
        /* Rows in order, vectorised over OC: deterministic. */
        for (int n = 0; n < N; n++) {
            const float *row = dout + (size_t)n * OC;
            for (int o = 0; o < OC; o++) dbias[o] += row[o];
        }
    }
}
