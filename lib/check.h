/* lib/check.h - one way to check a library call's result and say where it failed.
 *
 * Owns: the format of "a library call failed" messages:
 *     "FILE:LINE: EXPR: LIB error CODE: LIBRARY'S OWN ERROR STRING"
 * Must not: abort, exit, log or allocate; it only writes into the caller's
 * err buffer and hands the code back, so the caller keeps its `goto out` path.
 *
 * Every library gets one macro built on check_report():
 *     if (CURL_CHECK(curl_easy_setopt(h, CURLOPT_URL, url), err, errlen)) goto out;
 * CUDA, cuBLAS and NCCL variants join the same way (CUDA_CHECK with
 * cudaGetErrorString, CUBLAS_CHECK with cublasGetStatusString, NCCL_CHECK with
 * ncclGetErrorString) under their own #ifdef so this header stays includable
 * from plain C builds; so do TurboJPEG (TJ_CHECK with tjGetErrorStr2) and
 * libspng (SPNG_CHECK with spng_strerror), the worker's image decoders.
 */
#ifndef VITJOB_CHECK_H
#define VITJOB_CHECK_H

#include <stddef.h>
#include <stdio.h>

/* Formats the failure into err (when err and errlen are non-zero) and returns
 * code unchanged. code == 0 is success: nothing is written, 0 is returned. */
static inline int check_report(int code, const char *lib, const char *what, const char *expr,
                               const char *file, int line, char *err, size_t errlen)
{
    if (code != 0 && err && errlen > 0)
        snprintf(err, errlen, "%s:%d: %s: %s error %d: %s", file, line, expr, lib, code,
                 what ? what : "(no message)");
    return code;
}

#ifdef CURLINC_CURL_H /* <curl/curl.h> was included first */
static inline int check_curl(CURLcode code, const char *expr, const char *file, int line,
                             char *err, size_t errlen)
{
    if (code == CURLE_OK) return 0;
    return check_report((int)code, "curl", curl_easy_strerror(code), expr, file, line, err,
                        errlen);
}
/* Evaluates a CURLcode expression; 0 on success, else the CURLcode with err filled. */
#define CURL_CHECK(expr, err, errlen) check_curl((expr), #expr, __FILE__, __LINE__, (err), (errlen))
#endif

#if defined(__CUDA_RUNTIME_H__) || defined(__CUDACC__) /* <cuda_runtime.h> was included first */
static inline int check_cuda(cudaError_t code, const char *expr, const char *file, int line,
                             char *err, size_t errlen)
{
    if (code == cudaSuccess) return 0;
    return check_report((int)code, "cuda", cudaGetErrorString(code), expr, file, line, err,
                        errlen);
}
/* Evaluates a cudaError_t expression; 0 on success, else the code with err filled. */
#define CUDA_CHECK(expr, err, errlen) check_cuda((expr), #expr, __FILE__, __LINE__, (err), (errlen))
#endif

#ifdef CUBLAS_API_H_ /* <cublas_v2.h> was included first (also for cuBLASLt statuses) */
static inline int check_cublas(cublasStatus_t code, const char *expr, const char *file, int line,
                               char *err, size_t errlen)
{
    if (code == CUBLAS_STATUS_SUCCESS) return 0;
    return check_report((int)code, "cublas", cublasGetStatusString(code), expr, file, line, err,
                        errlen);
}
/* Evaluates a cublasStatus_t expression (cuBLAS or cuBLASLt). */
#define CUBLAS_CHECK(expr, err, errlen) \
    check_cublas((expr), #expr, __FILE__, __LINE__, (err), (errlen))
#endif

#ifdef NCCL_H_ /* <nccl.h> was included first */
static inline int check_nccl(ncclResult_t code, const char *expr, const char *file, int line,
                             char *err, size_t errlen)
{
    if (code == ncclSuccess) return 0;
    return check_report((int)code, "nccl", ncclGetErrorString(code), expr, file, line, err,
                        errlen);
}
/* Evaluates an ncclResult_t expression. */
#define NCCL_CHECK(expr, err, errlen) check_nccl((expr), #expr, __FILE__, __LINE__, (err), (errlen))
#endif

#ifdef __TURBOJPEG_H__ /* <turbojpeg.h> was included first */
static inline int check_tj(int rc, tjhandle h, const char *expr, const char *file, int line,
                           char *err, size_t errlen)
{
    if (rc == 0) return 0;
    /* TurboJPEG reports a libjpeg warning (TJERR_WARNING) as -1 too */
    char what[256];
    snprintf(what, sizeof what, "%s%s", tjGetErrorCode(h) == TJERR_WARNING ? "warning: " : "",
             tjGetErrorStr2(h));
    return check_report(rc, "turbojpeg", what, expr, file, line, err, errlen);
}
/* Evaluates a TurboJPEG call (0 or -1) on handle h; 0 on success, else -1 with
 * err filled with the handle's own error string. */
#define TJ_CHECK(expr, h, err, errlen) check_tj((expr), (h), #expr, __FILE__, __LINE__, (err), (errlen))
#endif

#ifdef SPNG_H /* <spng.h> was included first */
static inline int check_spng(int code, const char *expr, const char *file, int line, char *err,
                             size_t errlen)
{
    if (code == 0) return 0;
    return check_report(code, "spng", spng_strerror(code), expr, file, line, err, errlen);
}
/* Evaluates a libspng call (0 or an spng_errno); 0 on success, else the code
 * with err filled. */
#define SPNG_CHECK(expr, err, errlen) check_spng((expr), #expr, __FILE__, __LINE__, (err), (errlen))
#endif

#endif
