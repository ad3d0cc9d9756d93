/* kernels/ops_cuda_loader.c - ops_cuda() and ops_cuda_nccl(): finds and
 * loads the CUDA backend.
 *
 * Owns: deciding whether a GPU backend can exist in this process and
 * loading it (its op tables, and its NCCL communicator's table,
 * kernels/comm_nccl.h). The CUDA backend (the kernels/NAME.cu files) is
 * built as a plugin, lib/libvitjob_cuda.so beside bin/, linked against
 * cuBLASLt, cuBLAS, NCCL and the CUDA runtime; the binaries themselves link
 * none of them, so they start (and the operator runs) on machines without
 * NVIDIA's libraries, and a CPU run never maps cuBLAS's half a gigabyte.
 * Order of checks, each with its own one-line reason: built without nvcc;
 * no NVIDIA driver (libcuda.so.1); the plugin missing or not loadable; then
 * the plugin's own checks (a GPU, compute capability 8.0+, cuBLAS handles).
 * Must not: run any CUDA call itself, or retry: the first answer is kept for
 * the life of the process (a GPU does not appear mid-run).
 *
 * Plugin path: $VITJOB_CUDA_BACKEND when set, else ../lib/libvitjob_cuda.so
 * relative to the running executable (build/bin, build/tests and an
 * installed prefix all have lib/ beside them).
 */
#include "ops.h"
#include "comm_nccl.h"

#include <stdio.h>

#ifdef VITJOB_WITH_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The plugin's entry points (kernels/ops_cuda.cu, kernels/comm_nccl.cu). */
typedef const vit_ops *(*backend_fn)(int storage, char *err, size_t errlen);
typedef size_t (*peak_fn)(void);
typedef int (*graph_fn)(int op, size_t *nodes, char *err, size_t errlen);
typedef const vitjob_nccl_ops *(*nccl_fn)(char *err, size_t errlen);

static int tried;
static backend_fn backend;
static peak_fn peak;
static graph_fn graph;
static nccl_fn nccl;
static char why[PATH_MAX + 1024];

static void plugin_path(char *out, size_t len) /* len: PATH_MAX */
{
    const char *env = getenv("VITJOB_CUDA_BACKEND");
    if (env && env[0]) {
        snprintf(out, len, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(out, len, "libvitjob_cuda.so"); /* the loader's search path */
        return;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    if ((size_t)snprintf(out, len, "%s/../lib/libvitjob_cuda.so", exe) >= len)
        snprintf(out, len, "libvitjob_cuda.so");
}

static void load(void)
{
    tried = 1;
    /* No driver, no GPU: say so without loading cuBLAS. */
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) {
        snprintf(why, sizeof why, "no usable CUDA GPU: the NVIDIA driver (libcuda.so.1) is not "
                 "installed");
        return;
    }
    dlclose(driver);
    char path[PATH_MAX];
    plugin_path(path, sizeof path);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "cannot load the CUDA backend %s: %s", path, e ? e : "?");
        return;
    }
    /* POSIX's way to turn dlsym's object pointer into a function pointer */
    *(void **)&backend = dlsym(h, "vitjob_cuda_backend");
    *(void **)&peak = dlsym(h, "vitjob_cuda_peak_bytes");
    *(void **)&nccl = dlsym(h, "vitjob_nccl_table");
    *(void **)&graph = dlsym(h, "vitjob_cuda_graph");
    if (!backend || !peak || !nccl || !graph) {
        snprintf(why, sizeof why, "%s is not a vitjob CUDA backend (entry points missing)", path);
        backend = NULL;
        peak = NULL;
        nccl = NULL;
        graph = NULL;
        dlclose(h);
    } /* else kept loaded for the life of the process */
}

void ops_cuda_describe(char *out, size_t len)
{
    char path[PATH_MAX];
    plugin_path(path, sizeof path);
    if (access(path, R_OK) == 0)
        snprintf(out, len, "cuda (bf16, fp16, cuBLASLt), nccl: plugin %s", path);
    else
        snprintf(out, len, "cuda, nccl: built, but the plugin %s is missing", path);
}

const vit_ops *ops_cuda(int storage, char *err, size_t errlen)
{
    if (!tried) load();
    if (!backend) {
        snprintf(err, errlen, "%s", why);
        return NULL;
    }
    return backend(storage, err, errlen);
}

size_t ops_cuda_peak_bytes(void) { return peak ? peak() : 0; }

int ops_cuda_graph(ops_graph_op op, size_t *nodes, char *err, size_t errlen)
{
    if (!tried) load();
    if (!graph) {
        snprintf(err, errlen, "%s", why);
        return 1;
    }
    return graph((int)op, nodes, err, errlen);
}

const vitjob_nccl_ops *ops_cuda_nccl(char *err, size_t errlen)
{
    if (!tried) load();
    if (!nccl) {
        snprintf(err, errlen, "%s", why);
        return NULL;
    }
    return nccl(err, errlen);
}

#else
const vit_ops *ops_cuda(int storage, char *err, size_t errlen)
{
    (void)storage;
    snprintf(err, errlen, "this build has no CUDA backend (nvcc was not found when it was built)");
    return NULL;
}

size_t ops_cuda_peak_bytes(void) { return 0; }

int ops_cuda_graph(ops_graph_op op, size_t *nodes, char *err, size_t errlen)
{
    (void)op, (void)nodes;
    snprintf(err, errlen, "this build has no CUDA backend (nvcc was not found when it was built)");
    return 1;
}

void ops_cuda_describe(char *out, size_t len)
{
    snprintf(out, len, "cuda, nccl: not built (no nvcc when this was built)");
}

const vitjob_nccl_ops *ops_cuda_nccl(char *err, size_t errlen)
{
    snprintf(err, errlen, "this build has no CUDA backend (nvcc was not found when it was built)");
    return NULL;
}
#endif
