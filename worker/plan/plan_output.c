/* worker/plan/plan_output.c - see plan_output.h.
 * Must not: change a JSON key (the operator reads them) or compute a term
 * the plan does not hold. */
#include "plan_output.h"

#include <cjson/cJSON.h>

static void line(FILE *to, const char *what, size_t bytes)
{
    fprintf(to, "  %-34s %12.1f MiB\n", what, bytes / 1048576.0);
}

static void print_size(FILE *to, int replicas, int world, int micro, int accum, size_t bytes,
                       int fits, double ips, const char *note)
{
    fprintf(to, "  replicas %-5d %5d ranks  micro-batch %d x accumulation %-5d %12.1f MiB  "
            "%-12s", replicas, world, micro, accum, bytes / 1048576.0,
            fits ? "fits" : "does not fit");
    if (ips > 0) fprintf(to, " %10.1f images/s", ips);
    fprintf(to, "%s\n", note);
}

/* A line per size, smallest first, the plan's own last; a warning when a
 * size would not fit. */
static void print_elastic(FILE *to, const jobplan *p, const jobplan_elastic *e)
{
    fprintf(to, "elastic: minReplicas %d to replicas %d, global batch %d kept at every size:\n",
            e->min_replicas, e->replicas, p->global_batch);
    for (int i = 0; i < e->n_sizes; i++) {
        const jobplan_size *z = &e->sizes[i];
        print_size(to, z->replicas, z->world, z->micro, z->accum, z->total_bytes, z->fits,
                   z->images_per_s, "");
    }
    if (e->not_evaluated)
        fprintf(to, "  (%d larger allowed sizes not planned)\n", e->not_evaluated);
    print_size(to, e->replicas, p->world, p->micro, p->accum, p->mem.total_bytes, p->fits,
               p->images_per_s, " (the plan above)");
    if (e->n_sizes == 0) {
        fprintf(to, "warning: no size in [%d, %d] replicas divides the global batch %d into "
                "whole micro-batches per rank: the job could never shrink\n", e->min_replicas,
                e->replicas - 1, p->global_batch);
        return;
    }
    const jobplan_size *low = &e->sizes[0];
    if (low->replicas != e->min_replicas)
        fprintf(to, "  minReplicas %d is not an allowed size: the fewest replicas the job may "
                "shrink to is %d\n", e->min_replicas, low->replicas);
    if (!p->fits || low->fits) return;
    fprintf(to, "warning: at %d replicas (%d ranks, accumulation %d) a rank needs %.1f MiB, "
            "more than the device's %.1f MiB (sharding %s%s): ", low->replicas, low->world,
            low->accum, low->total_bytes / 1048576.0, p->device_bytes / 1048576.0,
            p->mem.sharding,
            p->optim_params < p->mem.n_params ? ": each rank's shard grows as the ranks fall" : "");
    if (e->smallest_fitting < e->replicas)
        fprintf(to, "a shrink below %d replicas would not fit; set elastic.minReplicas to %d, "
                "or make a change that needs less memory\n", e->smallest_fitting,
                e->smallest_fitting);
    else
        fprintf(to, "no shrink below %d replicas would fit; set elastic.minReplicas to %d, or "
                "make a change that needs less memory\n", e->replicas, e->replicas);
}

void jobplan_print(FILE *to, const jobplan *p, const jobplan_elastic *e)
{
    const jobplan_mem *m = &p->mem;
    fprintf(to, "plan: %zu parameters, sharding %s, rank %d of %d, micro-batch %d x %d "
            "accumulation = global batch %d\n", m->n_params, m->sharding, m->rank, m->world,
            p->micro, p->accum, p->global_batch);
    fprintf(to, "memory per rank:\n");
    line(to, "parameters (fp32)", m->param_bytes);
    line(to, "gradients (fp32)", m->grad_bytes);
    line(to, "optimizer state (AdamW m, v)", m->optim_bytes);
    if (m->ema_bytes) line(to, "EMA of the weights", m->ema_bytes);
    if (m->lowp_bytes) line(to, "16-bit copy of the weights", m->lowp_bytes);
    if (m->unit_bytes) line(to, "gathered units (full)", m->unit_bytes);
    line(to, "activations (as configured)", m->activation_bytes);
    line(to, "  with checkpointing", m->activation_ckpt_bytes);
    line(to, "  without checkpointing", m->activation_nockpt_bytes);
    line(to, "workspace", m->workspace_bytes);
    line(to, "collective buffers", m->collective_bytes);
    if (m->gpu_buffer_bytes) line(to, "cuBLASLt workspace, scratch", m->gpu_buffer_bytes);
    line(to, "= backend", m->backend_bytes);
    /* every line above the total is in it: on a GPU the host's lines come
     * after it, summed apart (they are not the GPU's memory) */
    if (m->reserve_bytes) {
        line(to, "CUDA context, NCCL (allowance)", m->reserve_bytes);
    } else {
        line(to, "batch and staging (host)", m->batch_bytes);
        line(to, "data loader queue (host)", m->loader_bytes);
    }
    line(to, m->reserve_bytes ? "total (GPU)" : "total", m->total_bytes);
    fprintf(to, "  %-34s %12.1f MiB (%s)\n", "device memory", p->device_bytes / 1048576.0,
            p->device);
    fprintf(to, "  %s\n", p->fits ? "fits" : "does not fit");
    if (m->reserve_bytes) {
        fprintf(to, "host memory per rank (beside the GPU's):\n");
        line(to, "batch and staging", m->batch_bytes);
        line(to, "data loader queue", m->loader_bytes);
        line(to, "total (host)", m->batch_bytes + m->loader_bytes);
    }
    fprintf(to, "time per step:\n");
    fprintf(to, "  %-34s %12.4g GFLOP\n", "model FLOPs (global batch)", p->flops_per_step / 1e9);
    if (p->flops_per_s > 0)
        fprintf(to, "  %-34s %12.4g GFLOP/s per rank (%s)\n", "compute rate",
                p->flops_per_s / 1e9, p->rate_source);
    else
        fprintf(to, "  %-34s %s\n", "compute rate", p->rate_source);
    fprintf(to, "  %-34s %12.4g s (accumulation %d x micro-batch %d)\n", "compute", p->compute_s,
            p->accum, p->micro);
    if (p->gpu_host_s > 0) {
        fprintf(to, "  %-34s %12.4g s\n", "  matmuls", p->gpu_matmul_s);
        fprintf(to, "  %-34s %12.4g s\n", "  attention", p->gpu_attention_s);
        fprintf(to, "  %-34s %12.4g s\n", "  memory-bound kernels", p->gpu_memory_s);
        fprintf(to, "  %-34s %12.4g s\n", "  kernel launches", p->gpu_launch_s);
        fprintf(to, "  %-34s %12.4g s\n", "  batch upload", p->gpu_upload_s);
        fprintf(to, "  %-34s %12.4g s\n", "  host", p->gpu_host_s);
    }
    fprintf(to, "  %-34s %12.4g s (%zu parameters x %.3g ns; %s)\n", "optimizer step",
            p->optim_s, p->optim_params, p->optim_s_per_param * 1e9, p->optim_source);
    fprintf(to, "  %-34s %12.1f MiB per rank\n", "collective volume", p->comm_bytes / 1048576.0);
    fprintf(to, "  %-34s %12.4g GB/s (%s)\n", "bus bandwidth", p->bus_bytes_per_s / 1e9,
            p->bus_source);
    fprintf(to, "  %-34s %12.4g s\n", "  the bytes", p->comm_bw_s);
    if (p->comm_thread)
        fprintf(to, "  %-34s %12.4g s (%.0f calls on the communication thread, %.3g ms each with "
                "its bytes beyond the compute it overlaps, less the bytes above; %s)\n",
                "  the calls' latency", p->comm_lat_s, p->comm_calls, p->call_s * 1e3,
                p->call_source);
    else
        fprintf(to, "  %-34s %12.4g s (%.0f calls, %.3g ms an all-reduce, half that a gather or "
                "scatter; %s)\n", "  the calls' latency", p->comm_lat_s, p->comm_calls,
                p->call_s * 1e3, p->call_source);
    fprintf(to, "  %-34s %12.4g s\n", "collectives", p->comm_s);
    if (p->step_s > 0) {
        fprintf(to, "  %-34s %12.4g s\n", "step", p->step_s);
        fprintf(to, "  %-34s %12.1f\n", "images per second", p->images_per_s);
    }
    if (!p->fits) {
        fprintf(to, "changes, each on top of the ones before:\n");
        for (int i = 0; i < p->n_changes; i++)
            fprintf(to, "  %-46s total %10.1f MiB  %s\n", p->changes[i].what,
                    p->changes[i].total_bytes / 1048576.0, p->changes[i].fits ? "fits" : "does not fit");
        if (p->suggestion >= 0) {
            fprintf(to, "suggestion:");
            for (int i = 0; i <= p->suggestion; i++) fprintf(to, " %s", p->changes[i].what);
            fprintf(to, "\n");
        } else {
            fprintf(to, "suggestion: none of these fits\n");
        }
    }
    if (e) print_elastic(to, p, e);
}

#define NUM(obj, key, v) cJSON_AddNumberToObject(obj, key, (double)(v))

/* "elastic": the bounds, a plan per allowed size below replicas, and the
 * fewest replicas from which every size fits. */
static int add_elastic(cJSON *o, const jobplan_elastic *e)
{
    cJSON *el = cJSON_AddObjectToObject(o, "elastic");
    cJSON *sizes = el ? cJSON_AddArrayToObject(el, "sizes") : NULL;
    if (!sizes) return -1;
    NUM(el, "minReplicas", e->min_replicas);
    NUM(el, "replicas", e->replicas);
    for (int i = 0; i < e->n_sizes; i++) {
        const jobplan_size *z = &e->sizes[i];
        cJSON *c = cJSON_CreateObject();
        if (!c || !cJSON_AddItemToArray(sizes, c)) {
            cJSON_Delete(c);
            return -1;
        }
        NUM(c, "replicas", z->replicas);
        NUM(c, "world", z->world);
        NUM(c, "microBatchSize", z->micro);
        NUM(c, "accumulation", z->accum);
        NUM(c, "totalBytes", z->total_bytes);
        cJSON_AddBoolToObject(c, "fits", z->fits);
        NUM(c, "imagesPerSecond", z->images_per_s);
    }
    NUM(el, "sizesNotPlanned", e->not_evaluated);
    NUM(el, "smallestFittingReplicas", e->smallest_fitting);
    return 0;
}

char *jobplan_json(const jobplan *p, const jobplan_elastic *e)
{
    const jobplan_mem *m = &p->mem;
    cJSON *o = cJSON_CreateObject(), *mem = cJSON_CreateObject(), *tm = cJSON_CreateObject(),
          *ch = cJSON_CreateArray();
    if (!o || !mem || !tm || !ch) {
        cJSON_Delete(o), cJSON_Delete(mem), cJSON_Delete(tm), cJSON_Delete(ch);
        return NULL;
    }
    NUM(o, "params", m->n_params);
    cJSON_AddStringToObject(o, "sharding", m->sharding);
    NUM(o, "world", m->world);
    NUM(o, "rank", m->rank);
    NUM(o, "microBatchSize", p->micro);
    NUM(o, "accumulation", p->accum);
    NUM(o, "globalBatchSize", p->global_batch);
    cJSON_AddStringToObject(o, "device", p->device);
    NUM(o, "deviceMemoryBytes", p->device_bytes);
    cJSON_AddBoolToObject(o, "fits", p->fits);
    NUM(mem, "parameters", m->param_bytes);
    NUM(mem, "gradients", m->grad_bytes);
    NUM(mem, "optimizerState", m->optim_bytes);
    NUM(mem, "ema", m->ema_bytes);
    NUM(mem, "lowPrecisionWeights", m->lowp_bytes);
    NUM(mem, "gatheredUnits", m->unit_bytes);
    NUM(mem, "activations", m->activation_bytes);
    NUM(mem, "activationsCheckpointed", m->activation_ckpt_bytes);
    NUM(mem, "activationsNotCheckpointed", m->activation_nockpt_bytes);
    NUM(mem, "workspace", m->workspace_bytes);
    NUM(mem, "collectiveBuffers", m->collective_bytes);
    NUM(mem, "gpuBuffers", m->gpu_buffer_bytes);
    NUM(mem, "backend", m->backend_bytes);
    NUM(mem, "batchAndStaging", m->batch_bytes);
    NUM(mem, "loaderQueue", m->loader_bytes);
    NUM(mem, "reserve", m->reserve_bytes);
    NUM(mem, "total", m->total_bytes);
    cJSON_AddItemToObject(o, "memoryPerRank", mem);
    NUM(tm, "flopsPerStep", p->flops_per_step);
    NUM(tm, "flopsPerSecondPerRank", p->flops_per_s);
    cJSON_AddStringToObject(tm, "rateSource", p->rate_source);
    NUM(tm, "computeSeconds", p->compute_s);
    if (p->gpu_host_s > 0) {
        cJSON *parts = cJSON_AddObjectToObject(tm, "gpuComputeSeconds");
        if (parts) {
            NUM(parts, "matmuls", p->gpu_matmul_s);
            NUM(parts, "attention", p->gpu_attention_s);
            NUM(parts, "memoryBound", p->gpu_memory_s);
            NUM(parts, "launches", p->gpu_launch_s);
            NUM(parts, "upload", p->gpu_upload_s);
            NUM(parts, "host", p->gpu_host_s);
        }
    }
    NUM(tm, "collectiveBytesPerRank", p->comm_bytes);
    NUM(tm, "busBytesPerSecond", p->bus_bytes_per_s);
    cJSON_AddStringToObject(tm, "busSource", p->bus_source);
    NUM(tm, "collectiveSeconds", p->comm_s);
    NUM(tm, "collectiveBandwidthSeconds", p->comm_bw_s);
    NUM(tm, "collectiveCalls", p->comm_calls);
    NUM(tm, "collectiveSecondsPerCall", p->call_s);
    cJSON_AddStringToObject(tm, "callSource", p->call_source);
    NUM(tm, "collectiveLatencySeconds", p->comm_lat_s);
    NUM(tm, "optimizerParamsPerRank", p->optim_params);
    NUM(tm, "optimizerSecondsPerParam", p->optim_s_per_param);
    cJSON_AddStringToObject(tm, "optimizerSource", p->optim_source);
    NUM(tm, "optimizerSeconds", p->optim_s);
    NUM(tm, "stepSeconds", p->step_s);
    NUM(tm, "imagesPerSecond", p->images_per_s);
    cJSON_AddItemToObject(o, "time", tm);
    for (int i = 0; i < p->n_changes; i++) {
        cJSON *c = cJSON_CreateObject();
        if (!c) continue;
        cJSON_AddStringToObject(c, "change", p->changes[i].what);
        NUM(c, "totalBytes", p->changes[i].total_bytes);
        cJSON_AddBoolToObject(c, "fits", p->changes[i].fits);
        cJSON_AddItemToArray(ch, c);
    }
    cJSON_AddItemToObject(o, "changes", ch);
    NUM(o, "suggestion", p->suggestion);
    if (e && add_elastic(o, e) != 0) {
        cJSON_Delete(o);
        return NULL;
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}
