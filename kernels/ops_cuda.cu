/* kernels/ops_cuda.cu - the CUDA backend's op tables, context and memory.
 *
 * Owns: initialising the one GPU of this process (stream, cuBLAS and
 * cuBLASLt handles, cuBLASLt's workspace), the sticky error, device memory
 * (alloc/release/upload/download, with a peak count for benchmarks), the
 * backend's scratch, and which CUDA function fills each slot of vit_ops, for
 * fp32 ("cuda"), bf16-mixed ("cuda-bf16") and fp16-mixed ("cuda-fp16");
 * the same three with the unfused attention ("...-unfused", asked for
 * with OPS_UNFUSED_ATTENTION), and the 16-bit two with the flash kernels'
 * tiles copied through registers ("...-flash-sync", OPS_FLASH_SYNC_LOADS)
 * or with the candidate kernels waiting for a GPU's measurement
 * ("...-candidates", OPS_CANDIDATE_KERNELS: the fused flash backward, bias
 * gradients from cuBLASLt's BGRADB epilogue, LayerNorm's one-pass
 * backward): tests and benchmarks.
 * Built with the other .cu files into the plugin lib/libvitjob_cuda.so,
 * loaded by kernels/ops_cuda_loader.c.
 * Must not: contain model math (kernels/NAME.cu does), or pick a GPU: one
 * process per GPU, the launcher sets CUDA_VISIBLE_DEVICES / LOCAL_RANK and
 * the process uses its current device.
 */
#include "cuda_buffers.h"
#include "cuda_common.cuh"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

cuda_ctx g_cuda;

int cuda_note(int rc)
{
    if (rc != 0) g_cuda.failed = 1; /* CU_ERRBUF kept the first message */
    return rc;
}

int cuda_wait_stream(void)
{
    g_cuda.waits++;
    return CU_TRY(cudaStreamSynchronize(g_cuda.stream));
}

/* ---- memory: sizes kept per pointer for the peak count ---- */

enum { MAX_ALLOCS = 4096 };
static struct {
    void *p;
    size_t bytes;
} allocs[MAX_ALLOCS];
static size_t live_bytes, peak_bytes;

static void track(void *p, size_t bytes)
{
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (!allocs[i].p) {
            allocs[i].p = p;
            allocs[i].bytes = bytes;
            break;
        }
    }
    live_bytes += bytes;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
}

static void untrack(void *p)
{
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].p == p) {
            live_bytes -= allocs[i].bytes;
            allocs[i].p = NULL;
            return;
        }
    }
}

static void *cuda_alloc(size_t bytes)
{
    if (g_cuda.failed) return NULL;
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is the caller's to report, not sticky */
        return NULL;
    }
    if (CU_TRY(cudaMemsetAsync(p, 0, bytes, g_cuda.stream)) || cuda_wait_stream()) {
        cudaFree(p);
        return NULL;
    }
    track(p, bytes);
    return p;
}

static void ahead_forget(const void *dst);

static void cuda_release(void *p)
{
    if (!p) return;
    /* ops queued on the stream may still read it (and an upload_ahead into
     * it: the stream waited for that copy when it was queued) */
    g_cuda.waits++;
    (void)cudaStreamSynchronize(g_cuda.stream);
    ahead_forget(p);
    untrack(p);
    (void)cudaFree(p);
}

/* ---- uploads: big ones through pinned staging, without a host wait ----
 *
 * A pageable cudaMemcpy moved a vit_b16 batch (77 MB of fp32 images) at
 * about 7 GB/s on the H100/H200: 10.6 ms of a 54 ms step, 18% (bench/NOTES.md).
 * An upload of STAGE_MIN bytes or more is cut into STAGE_BYTES pieces, and
 * each piece is copied by up to STAGE_THREADS host threads into one of two
 * pinned buffers, then queued as a DMA on the stream; the copy into the
 * other buffer overlaps that DMA. A buffer is reused only once its last DMA
 * has finished (an event). The host returns when its bytes are in pinned
 * memory, so the caller may reuse its buffer at once, as before, and the
 * DMA is ordered on the stream like every op. Smaller uploads go through a
 * pinned ring (RING_SLOTS slots of STAGE_MIN bytes, filled in turn, each
 * with the event of its last DMA), so that a step's small uploads (labels,
 * drop-path scales, soft targets) never wait for the stream either; only
 * if pinned memory cannot be had are they synchronous pageable copies.
 * An upload from pinned memory (pin: the trainer's batch buffer; host_alloc)
 * needs no staging: one DMA, queued, and the range's event recorded after
 * it; wait_host waits on that event before the caller writes it again.
 * download_async into pinned memory is the same the other way. */

#define STAGE_BYTES ((size_t)32 << 20)
#define STAGE_MIN ((size_t)1 << 20)
#define STAGE_PER_THREAD ((size_t)4 << 20)
#define STAGE_THREADS 8
#define RING_SLOTS 8

static struct {
    int tried, ok, next;
    void *buf[2];
    cudaEvent_t done[2];
    /* the small uploads' ring: slot `slot` is filled up to `fill` */
    char *ring[RING_SLOTS];
    cudaEvent_t ring_done[RING_SLOTS];
    int slot;
    size_t fill;
} g_stage;

struct copy_part {
    char *dst;
    const char *src;
    size_t n;
};

static void *copy_part_run(void *arg)
{
    struct copy_part *c = (struct copy_part *)arg;
    memcpy(c->dst, c->src, c->n);
    return NULL;
}

/* memcpy with up to STAGE_THREADS threads (at least STAGE_PER_THREAD bytes
 * each); the calling thread copies the first part. */
static void parallel_memcpy(void *dst, const void *src, size_t n)
{
    size_t nt = n / STAGE_PER_THREAD;
    if (nt > STAGE_THREADS) nt = STAGE_THREADS;
    if (nt < 2) {
        memcpy(dst, src, n);
        return;
    }
    struct copy_part part[STAGE_THREADS];
    pthread_t th[STAGE_THREADS];
    int started[STAGE_THREADS] = {0};
    const size_t each = (n / nt + 63) & ~(size_t)63;
    for (size_t i = 0; i < nt; i++) {
        size_t lo = i * each, hi = lo + each < n ? lo + each : n;
        part[i].dst = (char *)dst + lo;
        part[i].src = (const char *)src + lo;
        part[i].n = hi > lo ? hi - lo : 0;
        if (i > 0) started[i] = pthread_create(&th[i], NULL, copy_part_run, &part[i]) == 0;
    }
    copy_part_run(&part[0]);
    for (size_t i = 1; i < nt; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            copy_part_run(&part[i]); /* no thread: this one copies it */
    }
}

/* The pinned buffers, made at the first big upload; 0 if there are none. */
static int stage_ready(void)
{
    if (g_stage.tried) return g_stage.ok;
    g_stage.tried = 1;
    int made = 0; /* buffers with their event */
    for (; made < 2; made++) {
        if (cudaHostAlloc(&g_stage.buf[made], STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess)
            break;
        if (cudaEventCreateWithFlags(&g_stage.done[made], cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaFreeHost(g_stage.buf[made]);
            break;
        }
    }
    int rings = 0;
    for (; made == 2 && rings < RING_SLOTS; rings++) {
        if (cudaHostAlloc((void **)&g_stage.ring[rings], STAGE_MIN, cudaHostAllocDefault) !=
            cudaSuccess)
            break;
        if (cudaEventCreateWithFlags(&g_stage.ring_done[rings], cudaEventDisableTiming) !=
            cudaSuccess) {
            (void)cudaFreeHost(g_stage.ring[rings]);
            break;
        }
    }
    if (made < 2 || rings < RING_SLOTS) { /* no pinned memory: pageable copies, not an
                                           * error; nothing kept */
        (void)cudaGetLastError();
        for (int k = 0; k < made; k++) {
            (void)cudaEventDestroy(g_stage.done[k]);
            (void)cudaFreeHost(g_stage.buf[k]);
        }
        for (int k = 0; k < rings; k++) {
            (void)cudaEventDestroy(g_stage.ring_done[k]);
            (void)cudaFreeHost(g_stage.ring[k]);
        }
        return 0;
    }
    g_stage.ok = 1;
    return 1;
}

/* Host ranges page-locked by pin (cudaHostRegister) or allocated by
 * host_alloc (cudaHostAlloc): an upload from one is a direct DMA, no
 * staging copy; `done` is recorded after each copy queued from or to it
 * (`used`: one was), for wait_host. */
#define MAX_PINNED 32
static struct {
    const char *p;
    size_t bytes;
    int own, used; /* own: host_alloc's (cudaFreeHost), else pin's */
    cudaEvent_t done;
} g_pinned[MAX_PINNED];

/* A free entry for [host, host+bytes) with its event, or -1. */
static int note_pinned(void *host, size_t bytes, int own)
{
    for (int i = 0; i < MAX_PINNED; i++) {
        if (g_pinned[i].p) continue;
        if (cudaEventCreateWithFlags(&g_pinned[i].done, cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            return -1;
        }
        g_pinned[i].p = (const char *)host;
        g_pinned[i].bytes = bytes;
        g_pinned[i].own = own;
        g_pinned[i].used = 0;
        return i;
    }
    return -1;
}

static int cuda_pin(void *host, size_t bytes)
{
    if (g_cuda.failed || !host || bytes == 0) return 1;
    const int i = note_pinned(host, bytes, 0);
    if (i < 0) return 1;
    if (cudaHostRegister(host, bytes, cudaHostRegisterDefault) != cudaSuccess) {
        (void)cudaGetLastError(); /* not pinned: uploads stage it, not an error */
        (void)cudaEventDestroy(g_pinned[i].done);
        g_pinned[i].p = NULL;
        return 1;
    }
    return 0;
}

/* The entry holding [src, src+bytes), or -1. */
static int pinned_at(const void *src, size_t bytes)
{
    const char *s = (const char *)src;
    for (int i = 0; i < MAX_PINNED; i++)
        if (g_pinned[i].p && s >= g_pinned[i].p && bytes <= g_pinned[i].bytes &&
            (size_t)(s - g_pinned[i].p) <= g_pinned[i].bytes - bytes)
            return i;
    return -1;
}

/* memory pin did not take (or never saw): nothing to do */
static void cuda_unpin(void *host)
{
    for (int i = 0; i < MAX_PINNED; i++) {
        if (!host || g_pinned[i].p != host || g_pinned[i].own) continue;
        g_cuda.waits++;
        (void)cudaStreamSynchronize(g_cuda.stream); /* no DMA still reads it */
        (void)cudaHostUnregister(host);
        (void)cudaEventDestroy(g_pinned[i].done);
        (void)cudaGetLastError();
        g_pinned[i].p = NULL;
        return;
    }
}

static void *cuda_host_alloc(size_t bytes)
{
    if (g_cuda.failed) return NULL;
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory: the caller's to report */
        return NULL;
    }
    if (note_pinned(p, bytes, 1) < 0) {
        (void)cudaFreeHost(p);
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void cuda_host_free(void *host)
{
    for (int i = 0; i < MAX_PINNED; i++) {
        if (!host || g_pinned[i].p != host || !g_pinned[i].own) continue;
        if (g_pinned[i].used) (void)cudaEventSynchronize(g_pinned[i].done);
        (void)cudaEventDestroy(g_pinned[i].done);
        (void)cudaFreeHost(host);
        (void)cudaGetLastError();
        g_pinned[i].p = NULL;
        return;
    }
}

/* Whether the compute stream is being captured into a graph: set and
 * cleared by vitjob_cuda_graph (ops.h: ops_cuda_graph), the only thing that
 * starts a capture, so the ops read a flag instead of asking CUDA on every
 * upload. While it is set, the host-side events (a pinned range's, the
 * ring's and the staging buffers', upload_ahead's) are not recorded: CUDA
 * refuses to wait on an event last recorded in a capture, and the replays
 * are synchronized by their caller. */
static int g_capturing;
static int capturing(void) { return g_capturing; }

/* After a copy queued from or to pinned entry i on stream st. */
static void pinned_used(int i, cudaStream_t st)
{
    if (capturing()) return;
    if (!CU_TRY(cudaEventRecord(g_pinned[i].done, st))) g_pinned[i].used = 1;
}

static void cuda_wait_host(const void *host)
{
    const int i = pinned_at(host, 1);
    if (i < 0 || !g_pinned[i].used) return;
    CU_TRY(cudaEventSynchronize(g_pinned[i].done));
}

/* A small upload through the ring: the bytes copied into the current slot
 * (or the next one, once its last DMA has finished), the DMA queued. */
static void ring_upload(void *dst, const void *src, size_t bytes)
{
    if (g_stage.fill + bytes > STAGE_MIN) {
        g_stage.slot = (g_stage.slot + 1) % RING_SLOTS;
        g_stage.fill = 0;
        if (CU_TRY(cudaEventSynchronize(g_stage.ring_done[g_stage.slot]))) return;
    }
    char *at = g_stage.ring[g_stage.slot] + g_stage.fill;
    memcpy(at, src, bytes);
    g_stage.fill += (bytes + 255) & ~(size_t)255;
    if (CU_TRY(cudaMemcpyAsync(dst, at, bytes, cudaMemcpyHostToDevice, g_cuda.stream))) return;
    if (!capturing()) CU_TRY(cudaEventRecord(g_stage.ring_done[g_stage.slot], g_cuda.stream));
}

static void cuda_upload(void *dst, const void *src, size_t bytes)
{
    CU_GUARD();
    if (bytes == 0) return;
    const int pin = pinned_at(src, bytes);
    if (pin >= 0) { /* one DMA, queued; wait_host before the caller writes it again */
        if (!CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_cuda.stream)))
            pinned_used(pin, g_cuda.stream);
        return;
    }
    if (!stage_ready()) { /* no pinned memory at all: synchronous pageable copies */
        if (CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_cuda.stream)))
            return;
        cuda_wait_stream();
        return;
    }
    if (bytes < STAGE_MIN) {
        ring_upload(dst, src, bytes);
        return;
    }
    if (capturing()) { /* the two buffers would be refilled before the graph's copies ran */
        if (!g_cuda.failed)
            snprintf(g_cuda.err, sizeof g_cuda.err,
                     "%s:%d: an upload of %zu bytes from unpinned memory cannot be captured "
                     "into a graph (pin the source)", __FILE__, __LINE__, bytes);
        cuda_note((int)cudaErrorStreamCaptureUnsupported);
        return;
    }
    for (size_t at = 0; at < bytes; at += STAGE_BYTES) {
        const size_t n = bytes - at < STAGE_BYTES ? bytes - at : STAGE_BYTES;
        const int k = g_stage.next;
        g_stage.next ^= 1;
        /* this buffer's previous DMA has finished (at once if it never ran) */
        if (CU_TRY(cudaEventSynchronize(g_stage.done[k]))) return;
        parallel_memcpy(g_stage.buf[k], (const char *)src + at, n);
        if (CU_TRY(cudaMemcpyAsync((char *)dst + at, g_stage.buf[k], n, cudaMemcpyHostToDevice,
                                   g_cuda.stream)) ||
            CU_TRY(cudaEventRecord(g_stage.done[k], g_cuda.stream)))
            return;
    }
}

static void cuda_download(void *dst, const void *src, size_t bytes)
{
    if (g_cuda.failed) {
        memset(dst, 0, bytes); /* defined contents; status() says why */
        return;
    }
    if (bytes > 0)
        CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_cuda.stream));
    cuda_wait_stream();
}

static void cuda_download_async(void *dst, const void *src, size_t bytes)
{
    const int pin = pinned_at(dst, bytes ? bytes : 1);
    if (pin < 0 || g_cuda.failed) {
        cuda_download(dst, src, bytes);
        return;
    }
    if (bytes > 0 &&
        !CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_cuda.stream)))
        pinned_used(pin, g_cuda.stream);
}

static unsigned long cuda_host_waits(void) { return g_cuda.waits; }

/* ---- the next batch's upload on a copy stream (ops.h: upload_ahead) ----
 * Each destination has two events: `consumed`, recorded on the compute
 * stream by consumed() after the last op that reads its present bytes, and
 * `copied`, recorded on the copy stream after its newest copy. The copy
 * stream waits for `consumed` before the copy; the compute stream waits for
 * `copied` at once, so the ops queued after upload_ahead see the bytes and
 * any later wait for the compute stream (download, release, synchronize)
 * covers the copy too. */
enum { UPLOAD_AHEAD_MAX = 4 };
static struct {
    const void *dst;
    cudaEvent_t consumed, copied;
} g_ahead[UPLOAD_AHEAD_MAX];
static cudaStream_t g_copy_stream; /* made at the first upload_ahead */

/* dst's entry, made when `make` and there is room; -1 if none. */
static int ahead_slot(const void *dst, int make)
{
    for (int i = 0; i < UPLOAD_AHEAD_MAX; i++)
        if (g_ahead[i].dst == dst) return i;
    if (!make) return -1;
    for (int i = 0; i < UPLOAD_AHEAD_MAX; i++) {
        if (g_ahead[i].dst) continue;
        if (cudaEventCreateWithFlags(&g_ahead[i].consumed, cudaEventDisableTiming) !=
            cudaSuccess) {
            (void)cudaGetLastError(); /* no entry: upload_ahead is upload */
            return -1;
        }
        if (cudaEventCreateWithFlags(&g_ahead[i].copied, cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            (void)cudaEventDestroy(g_ahead[i].consumed);
            return -1;
        }
        g_ahead[i].dst = dst;
        return i;
    }
    return -1;
}

static void ahead_forget(const void *dst)
{
    const int i = ahead_slot(dst, 0);
    if (i < 0) return;
    (void)cudaEventDestroy(g_ahead[i].consumed);
    (void)cudaEventDestroy(g_ahead[i].copied);
    g_ahead[i].dst = NULL;
}

static void cuda_upload_ahead(void *dst, const void *src, size_t bytes)
{
    CU_GUARD();
    if (bytes == 0) return;
    /* a capture cannot wait for events recorded before it: in line */
    if (capturing()) {
        cuda_upload(dst, src, bytes);
        return;
    }
    const int pin = pinned_at(src, bytes);
    int a = pin >= 0 ? ahead_slot(dst, 1) : -1;
    if (a >= 0 && !g_copy_stream &&
        cudaStreamCreateWithFlags(&g_copy_stream, cudaStreamNonBlocking) != cudaSuccess) {
        (void)cudaGetLastError();
        g_copy_stream = NULL;
        a = -1;
    }
    if (a < 0) { /* not pinned, or no entry or stream: in line with the ops */
        cuda_upload(dst, src, bytes);
        return;
    }
    /* after the readers of dst's present bytes, and after any copy queued
     * before from or to the same pinned range (its event then covers both) */
    if (CU_TRY(cudaStreamWaitEvent(g_copy_stream, g_ahead[a].consumed, 0)) ||
        (g_pinned[pin].used && CU_TRY(cudaStreamWaitEvent(g_copy_stream, g_pinned[pin].done, 0))) ||
        CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_copy_stream)))
        return;
    pinned_used(pin, g_copy_stream); /* wait_host(src) waits for this copy */
    if (CU_TRY(cudaEventRecord(g_ahead[a].copied, g_copy_stream))) return;
    CU_TRY(cudaStreamWaitEvent(g_cuda.stream, g_ahead[a].copied, 0));
}

static void cuda_consumed(const void *dst)
{
    CU_GUARD();
    /* the entry is made here too: a later upload_ahead waits for these
     * readers even if the upload before them went in line */
    if (capturing()) return;
    const int a = ahead_slot(dst, 1);
    if (a >= 0) CU_TRY(cudaEventRecord(g_ahead[a].consumed, g_cuda.stream));
}

static void cuda_synchronize(void)
{
    CU_GUARD();
    cuda_wait_stream();
}

static int cuda_status(char *err, size_t errlen)
{
    if (!g_cuda.failed) {
        /* surface asynchronous kernel faults too */
        cudaError_t e = cudaPeekAtLastError();
        if (e != cudaSuccess) CU_TRY(e);
    }
    if (!g_cuda.failed) return 0;
    if (err && errlen) snprintf(err, errlen, "%s", g_cuda.err);
    return 1;
}

void *cuda_scratch(size_t bytes)
{
    if (g_cuda.failed) return NULL;
    if (bytes <= g_cuda.scratch_bytes) return g_cuda.scratch;
    if (g_cuda.scratch) {
        if (cuda_wait_stream()) return NULL;
        untrack(g_cuda.scratch);
        cudaFree(g_cuda.scratch);
        g_cuda.scratch = NULL;
        g_cuda.scratch_bytes = 0;
    }
    size_t want = cuda_scratch_size(bytes);
    if (CU_TRY(cudaMalloc(&g_cuda.scratch, want))) {
        g_cuda.scratch = NULL;
        return NULL;
    }
    track(g_cuda.scratch, want);
    g_cuda.scratch_bytes = want;
    return g_cuda.scratch;
}

extern "C" size_t vitjob_cuda_peak_bytes(void) { return peak_bytes; }

static int cuda_init(char *err, size_t errlen);

/* Initialises the GPU once (cuda_init); 1 if it is usable, else 0 with
 * its reason in err (the same reason every time). */
static int cuda_ready(char *err, size_t errlen)
{
    static int tried, ok;
    static char why[512];
    if (!tried) {
        tried = 1;
        ok = cuda_init(why, sizeof why) == 0;
    }
    if (!ok) snprintf(err, errlen, "%s", why);
    return ok;
}

/* ---- a step as a CUDA graph (ops.h: ops_cuda_graph; gpu_bench --graph) ---- */
static cudaGraph_t g_graph;
static cudaGraphExec_t g_graph_exec;

static void graph_free(void)
{
    if (g_graph_exec) (void)cudaGraphExecDestroy(g_graph_exec);
    if (g_graph) (void)cudaGraphDestroy(g_graph);
    g_graph_exec = NULL;
    g_graph = NULL;
}

/* The backend's first failure, or what CUDA says of e. Returns 1. */
static int graph_fail(cudaError_t e, const char *what, char *err, size_t errlen)
{
    if (g_cuda.failed)
        snprintf(err, errlen, "%s: %s", what, g_cuda.err);
    else
        snprintf(err, errlen, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    (void)cudaGetLastError();
    return 1;
}

extern "C" int vitjob_cuda_graph(int op, size_t *nodes, char *err, size_t errlen)
{
    if (!cuda_ready(err, errlen)) return 1;
    cudaError_t e = cudaSuccess;
    switch (op) {
    case OPS_GRAPH_BEGIN:
        graph_free();
        if (g_cuda.failed) return graph_fail(e, "graph capture", err, errlen);
        /* relaxed: the ring's host-side waits (cudaEventSynchronize on
         * events recorded before the capture) stay legal */
        e = cudaStreamBeginCapture(g_cuda.stream, cudaStreamCaptureModeRelaxed);
        if (e != cudaSuccess) return graph_fail(e, "cudaStreamBeginCapture", err, errlen);
        g_capturing = 1;
        return 0;
    case OPS_GRAPH_END: {
        cudaGraph_t g = NULL;
        e = cudaStreamEndCapture(g_cuda.stream, &g);
        g_capturing = 0;
        if (e != cudaSuccess || g_cuda.failed) {
            if (g) (void)cudaGraphDestroy(g);
            return graph_fail(e, "the captured step", err, errlen);
        }
        g_graph = g;
        size_t n = 0;
        if ((e = cudaGraphGetNodes(g_graph, NULL, &n)) != cudaSuccess ||
            (e = cudaGraphInstantiate(&g_graph_exec, g_graph, 0)) != cudaSuccess) {
            graph_free();
            return graph_fail(e, "cudaGraphInstantiate", err, errlen);
        }
        if (nodes) *nodes = n;
        return 0;
    }
    case OPS_GRAPH_REPLAY:
        if (!g_graph_exec) {
            snprintf(err, errlen, "graph replay: no graph captured");
            return 1;
        }
        e = cudaGraphLaunch(g_graph_exec, g_cuda.stream);
        return e != cudaSuccess ? graph_fail(e, "cudaGraphLaunch", err, errlen) : 0;
    case OPS_GRAPH_FREE:
        graph_free();
        return 0;
    default:
        snprintf(err, errlen, "ops_cuda_graph: unknown op %d", op);
        return 1;
    }
}

/* ---- the tables ---- */

#define CUDA_TABLE(NAME, X, BF16, FP16, ATT, MMB, LNB)                     \
    {                                                                      \
        NAME, 1, BF16, FP16, sizeof(X),                                    \
        cuda_alloc, cuda_release, cuda_upload, cuda_download,              \
        cuda_pin, cuda_unpin, cuda_host_alloc, cuda_host_free,             \
        cuda_download_async, cuda_wait_host, cuda_host_waits,              \
        cuda_upload_ahead, cuda_consumed, cuda_status,                     \
        cuda_synchronize, attention_scratch_bytes##ATT##cuda<X>,           \
        patchify_cuda<X>,                                                  \
        matmul_forward_cuda<X>,                                            \
        matmul_forward_residual_cuda<X>,                                   \
        matmul_backward##MMB##cuda<X>,                                     \
        embed_forward_cuda<X>,                                             \
        embed_backward_cuda<X>,                                            \
        layernorm_forward_cuda<X>,                                         \
        layernorm_backward##LNB##cuda<X>,                                  \
        attention_forward##ATT##cuda<X>,                                   \
        attention_backward##ATT##cuda<X>,                                  \
        gelu_forward_cuda<X>,                                              \
        gelu_backward_cuda<X>,                                             \
        zero_cuda,                                                         \
        to_floatx_cuda<X>,                                                 \
        to_float_cuda<X>,                                                  \
        gather_cls_cuda,                                                   \
        scatter_cls_backward_cuda,                                         \
        crossentropy_forward_cuda<X>,                                      \
        crossentropy_backward_cuda<X>,                                     \
        sum_squares_cuda,                                                  \
        sum_squares_into_cuda,                                             \
        scale_cuda,                                                        \
        copy_cuda,                                                         \
        add_cuda,                                                          \
        adamw_update_cuda<X>,                                              \
        crossentropy_soft_forward_cuda<X>,                                 \
        crossentropy_soft_backward_cuda<X>,                                \
        droppath_forward_cuda,                                             \
        droppath_backward_cuda<X>,                                         \
        ema_update_cuda,                                                   \
        swap_cuda,                                                         \
        adamw_multi_cuda<X>,                                               \
    }

/* Positional on purpose: C++17 has no designated initializers, and a slot
 * out of order fails to compile because every slot's type differs. */
static const vit_ops cuda_fp32_ops = CUDA_TABLE("cuda", float, 0, 0, _, _, _);
static const vit_ops cuda_bf16_ops = CUDA_TABLE("cuda-bf16", bf16, 1, 0, _, _, _);
/* cuda-fp16: 16-bit floatX, half */
static const vit_ops cuda_fp16_ops = CUDA_TABLE("cuda-fp16", f16, 1, 1, _, _, _);
/* OPS_UNFUSED_ATTENTION: the same, with attention always on the unfused path */
static const vit_ops cuda_fp32_unfused_ops =
    CUDA_TABLE("cuda-unfused", float, 0, 0, _unfused_, _, _);
static const vit_ops cuda_bf16_unfused_ops =
    CUDA_TABLE("cuda-bf16-unfused", bf16, 1, 0, _unfused_, _, _);
static const vit_ops cuda_fp16_unfused_ops =
    CUDA_TABLE("cuda-fp16-unfused", f16, 1, 1, _unfused_, _, _);
/* OPS_FLASH_SYNC_LOADS: the 16-bit tables with the flash kernels' tiles
 * copied through registers instead of cp.async (fp32 has no flash path) */
static const vit_ops cuda_bf16_flash_sync_ops =
    CUDA_TABLE("cuda-bf16-flash-sync", bf16, 1, 0, _flash_sync_, _, _);
static const vit_ops cuda_fp16_flash_sync_ops =
    CUDA_TABLE("cuda-fp16-flash-sync", f16, 1, 1, _flash_sync_, _, _);
/* OPS_CANDIDATE_KERNELS (ops.h): the fused flash backward (the 16-bit
 * tables; fp32's attention is the default's), bias gradients from the
 * BGRADB epilogue and LayerNorm's one-pass backward */
static const vit_ops cuda_fp32_candidate_ops =
    CUDA_TABLE("cuda-candidates", float, 0, 0, _flash_fused_, _bgradb_, _onepass_);
static const vit_ops cuda_bf16_candidate_ops =
    CUDA_TABLE("cuda-bf16-candidates", bf16, 1, 0, _flash_fused_, _bgradb_, _onepass_);
static const vit_ops cuda_fp16_candidate_ops =
    CUDA_TABLE("cuda-fp16-candidates", f16, 1, 1, _flash_fused_, _bgradb_, _onepass_);

/* Launched never: whether this build has code for the GPU (cuda_init). */
static __global__ void probe_kernel(void) {}


static int cuda_init(char *err, size_t errlen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, errlen, "no usable CUDA GPU: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
        (void)cudaGetLastError();
        return -1;
    }
    int cc_major = 0, cc_minor = 0;
    if (CUDA_CHECK(cudaGetDevice(&g_cuda.device), err, errlen) ||
        CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor,
                                          g_cuda.device), err, errlen) ||
        CUDA_CHECK(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor,
                                          g_cuda.device), err, errlen))
        return -1;
    /* A GPU this build has no code for (CUDA_ARCH: sm_80 and sm_90 code and
     * sm_90 PTX by default; a T4 needs sm_75 added) would fail at the first
     * kernel launch, mid-run, as if it had faulted: say so at start. bf16
     * GEMMs need sm_80 (vitjob_cuda_backend refuses cuda-bf16 below it);
     * fp16-mixed and fp32 run from sm_75 (CUDA 13 has no code for V100's
     * sm_70). */
    cudaFuncAttributes probe;
    if (cudaFuncGetAttributes(&probe, probe_kernel) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(err, errlen,
                 "no usable CUDA GPU: device %d has compute capability %d.%d and this build has "
                 "no code for it (build with CUDA_ARCH including sm_%d%d)",
                 g_cuda.device, cc_major, cc_minor, cc_major, cc_minor);
        return -1;
    }
    g_cuda.cc_major = cc_major;
    g_cuda.cc_minor = cc_minor;
    if (CUDA_CHECK(cudaDeviceGetAttribute(&g_cuda.sm_count, cudaDevAttrMultiProcessorCount,
                                          g_cuda.device), err, errlen) ||
        CUDA_CHECK(cudaDeviceGetAttribute(&g_cuda.smem_optin,
                                          cudaDevAttrMaxSharedMemoryPerBlockOptin, g_cuda.device),
                   err, errlen) ||
        CUDA_CHECK(cudaStreamCreateWithFlags(&g_cuda.stream, cudaStreamNonBlocking), err,
                   errlen) ||
        CUBLAS_CHECK(cublasCreate(&g_cuda.blas), err, errlen) ||
        CUBLAS_CHECK(cublasSetStream(g_cuda.blas, g_cuda.stream), err, errlen) ||
        /* default math: CUBLAS_COMPUTE_32F on fp32 data stays fp32 (no TF32) */
        CUBLAS_CHECK(cublasSetMathMode(g_cuda.blas, CUBLAS_DEFAULT_MATH), err, errlen) ||
        CUBLAS_CHECK(cublasLtCreate(&g_cuda.lt), err, errlen) ||
        CUDA_CHECK(cudaMalloc(&g_cuda.lt_workspace, CUDA_LT_WORKSPACE_BYTES), err, errlen) ||
        /* zeroed once: on the H100, compute-sanitizer's initcheck saw
         * cuBLASLt's split-K reduce kernel read words of a fresh workspace
         * that nothing had written (fmnist_small's dW products, bf16) */
        CUDA_CHECK(cudaMemset(g_cuda.lt_workspace, 0, CUDA_LT_WORKSPACE_BYTES), err, errlen))
        return -1;
    g_cuda.lt_workspace_bytes = CUDA_LT_WORKSPACE_BYTES;
    track(g_cuda.lt_workspace, CUDA_LT_WORKSPACE_BYTES);
    return 0;
}

/* The plugin's entry points, found by kernels/ops_cuda_loader.c with dlsym
 * (ops_cuda and ops_cuda_peak_bytes there). */
extern "C" const vit_ops *vitjob_cuda_backend(int storage, char *err, size_t errlen)
{
    if (!cuda_ready(err, errlen)) return NULL;
    const int unfused = (storage & OPS_UNFUSED_ATTENTION) != 0;
    const int sync_loads = (storage & OPS_FLASH_SYNC_LOADS) != 0;
    const int candidates = (storage & OPS_CANDIDATE_KERNELS) != 0;
    storage &= ~(OPS_UNFUSED_ATTENTION | OPS_FLASH_SYNC_LOADS | OPS_CANDIDATE_KERNELS);
    if (storage == OPS_BF16 && g_cuda.cc_major < 8) {
        snprintf(err, errlen,
                 "no usable CUDA GPU for bf16-mixed: device %d has compute capability %d.%d, "
                 "bf16 needs 8.0 or newer; use training.precision=fp16-mixed",
                 g_cuda.device, g_cuda.cc_major, g_cuda.cc_minor);
        return NULL;
    }
    if (unfused)
        return storage == OPS_FP16   ? &cuda_fp16_unfused_ops
               : storage == OPS_BF16 ? &cuda_bf16_unfused_ops
                                     : &cuda_fp32_unfused_ops;
    if (candidates)
        return storage == OPS_FP16   ? &cuda_fp16_candidate_ops
               : storage == OPS_BF16 ? &cuda_bf16_candidate_ops
                                     : &cuda_fp32_candidate_ops;
    if (sync_loads)
        return storage == OPS_FP16   ? &cuda_fp16_flash_sync_ops
               : storage == OPS_BF16 ? &cuda_bf16_flash_sync_ops
                                     : &cuda_fp32_ops;
    return storage == OPS_FP16 ? &cuda_fp16_ops
           : storage == OPS_BF16 ? &cuda_bf16_ops : &cuda_fp32_ops;
}
