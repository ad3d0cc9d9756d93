/* tests/test_check.c - the one check macro per library (lib/check.h) names
 * the file, the line, the expression and the library's own error string,
 * for libcurl, CUDA, cuBLAS and NCCL (no GPU needed: only the error strings
 * are used). */
#ifdef VITJOB_WITH_CUDA
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <nccl.h>
#endif
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "check.h"

#ifdef VITJOB_WITH_CUDA
Test(check, cuda_check_names_file_line_expression_and_cuda_message)
{
    char err[256] = "";
    int line = __LINE__ + 1;
    int rc = CUDA_CHECK(cudaErrorMemoryAllocation, err, sizeof err);
    cr_assert_eq(rc, (int)cudaErrorMemoryAllocation);
    char want[256];
    snprintf(want, sizeof want, "%s:%d: cudaErrorMemoryAllocation: cuda error %d: %s", __FILE__,
             line, (int)cudaErrorMemoryAllocation, cudaGetErrorString(cudaErrorMemoryAllocation));
    cr_assert_str_eq(err, want);
    cr_assert(strstr(err, "out of memory") != NULL, "%s", err);
}

Test(check, cuda_check_on_success_returns_zero_and_leaves_err_alone)
{
    char err[32] = "untouched";
    cr_assert_eq(CUDA_CHECK(cudaSuccess, err, sizeof err), 0);
    cr_assert_str_eq(err, "untouched");
}

Test(check, cublas_check_uses_cublas_status_string)
{
    char err[256] = "";
    int rc = CUBLAS_CHECK(CUBLAS_STATUS_NOT_INITIALIZED, err, sizeof err);
    cr_assert_eq(rc, (int)CUBLAS_STATUS_NOT_INITIALIZED);
    cr_assert(strstr(err, "cublas error 1: ") != NULL, "%s", err);
    cr_assert(strstr(err, cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED)) != NULL, "%s", err);
    cr_assert(strstr(err, "test_check.c:") == err + strlen(err) - strlen(strstr(err, "test_check.c:")),
              "%s", err);
}

Test(check, nccl_check_uses_nccl_error_string)
{
    char err[256] = "";
    int rc = NCCL_CHECK(ncclInvalidArgument, err, sizeof err);
    cr_assert_eq(rc, (int)ncclInvalidArgument);
    cr_assert(strstr(err, "ncclInvalidArgument: nccl error 4: ") != NULL, "%s", err);
    cr_assert(strstr(err, ncclGetErrorString(ncclInvalidArgument)) != NULL, "%s", err);
}
#else
Test(check, cuda_cublas_nccl_checks_need_a_cuda_build)
{
    cr_skip_test("this build has no CUDA backend (nvcc was not found)");
}
#endif

Test(check, curl_check_reports_file_line_expression_and_curls_own_message)
{
    char err[1024] = "";
    int line = __LINE__ + 1;
    int rc = CURL_CHECK(CURLE_COULDNT_CONNECT, err, sizeof err);
    cr_assert_eq(rc, CURLE_COULDNT_CONNECT);
    char want[64];
    snprintf(want, sizeof want, "test_check.c:%d:", line);
    cr_assert(strstr(err, want), "%s", err);
    cr_assert(strstr(err, "CURLE_COULDNT_CONNECT"), "%s", err);
    cr_assert(strstr(err, curl_easy_strerror(CURLE_COULDNT_CONNECT)), "%s", err);
    err[0] = '\0';
    cr_assert_eq(CURL_CHECK(CURLE_OK, err, sizeof err), 0);
    cr_assert_str_eq(err, "", "success writes nothing");
}
