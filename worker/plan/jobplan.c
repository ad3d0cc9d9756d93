/* worker/plan/jobplan.c - see jobplan.h. The memory is plan_memory.c's
 * sum, the time plan_time.c's; what this file adds is the device's memory,
 * the fit and the order of the suggestions.
 * Must not: size or time anything itself, or name a sharding mode (the
 * suggestions' modes come from dp.h's table). */
#include "jobplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp.h"
#include "plan_time.h"
#include "sysres.h"

static int plan_threads(const vit_job_config *cfg, const jobplan_target *t)
{
    if (t->threads > 0) return t->threads;
    if (cfg->training.threads > 0) return cfg->training.threads;
    int cpus = sysres_cpus("", 0, NULL, 0) / (t->local_ranks > 0 ? t->local_ranks : 1);
    return cpus < 1 ? 1 : cpus;
}

static vj_err mem_for(const vit_job_config *cfg, const jobplan_target *t, jobplan_mem *m, char *err,
                      size_t errlen)
{
    const int world = t->replicas * t->local_ranks, threads = plan_threads(cfg, t);
    const vit_ops *ops = t->gpu ? jobplan_gpu_ops(cfg->training.precision)
                                : jobplan_cpu_ops(cfg->training.precision);
    /* the CPU attention's scratch is per thread: as many as a rank runs */
    if (!t->gpu) ops_cpu_set_threads(threads);
    return jobplan_memory(cfg, ops, world, 0, 0, threads, m, err, errlen);
}

static int divides(const vit_job_config *cfg, int world)
{
    long long per = (long long)cfg->training.micro_batch_size * world;
    return per > 0 && cfg->training.global_batch_size % per == 0;
}

static void add_change(jobplan *p, const char *what, const jobplan_mem *m)
{
    if (p->n_changes >= JOBPLAN_MAX_CHANGES) return;
    jobplan_change *c = &p->changes[p->n_changes++];
    snprintf(c->what, sizeof c->what, "%s", what);
    c->total_bytes = m->total_bytes;
    c->fits = (double)m->total_bytes <= p->device_bytes;
    if (c->fits && p->suggestion < 0) p->suggestion = p->n_changes - 1;
}

/* Each change on top of the ones before: checkpointing, grad-op, full,
 * halving the micro-batch (more accumulation), doubling the replicas. */
static vj_err suggest(const vit_job_config *cfg0, const jobplan_target *t0, jobplan *p, char *err,
                      size_t errlen)
{
    static vit_job_config cfg;
    cfg = *cfg0;
    jobplan_target t = *t0;
    jobplan_mem m;
    char what[160];
    vj_err rc;
    p->suggestion = -1;
    /* the changes are config assignments, applied as --set would apply them:
     * checkpointing, then each mode that shards more than the job's, least
     * first (dp.h's table), each with checkpointing */
    static const char ckpt[] = "training.activationCheckpointing=true";
    sharding_mode more[4];
    const int n_more = dp_modes_sharding_more(cfg.training.sharding, more, 4);
    for (int i = -1; i < n_more; i++) {
        if (i < 0 && cfg.training.activation_checkpointing) continue;
        if (i < 0)
            snprintf(what, sizeof what, "%s", ckpt);
        else
            snprintf(what, sizeof what, "training.sharding=%s", dp_mode_name(more[i]));
        if ((rc = config_set(&cfg, what, err, errlen)) != VJ_OK ||
            (rc = config_set(&cfg, ckpt, err, errlen)) != VJ_OK ||
            (rc = mem_for(&cfg, &t, &m, err, errlen)))
            return rc;
        add_change(p, what, &m);
        if (p->suggestion >= 0) return VJ_OK;
    }
    const int world = t.replicas * t.local_ranks;
    while (cfg.training.micro_batch_size > 1) {
        int micro = cfg.training.micro_batch_size / 2;
        cfg.training.micro_batch_size = micro;
        if (!divides(&cfg, world)) continue;
        if ((rc = mem_for(&cfg, &t, &m, err, errlen))) return rc;
        if ((double)m.total_bytes <= p->device_bytes || micro == 1) {
            snprintf(what, sizeof what, "training.microBatchSize=%d (accumulation %d)", micro,
                     cfg.training.global_batch_size / (micro * world));
            add_change(p, what, &m);
            if (p->suggestion >= 0) return VJ_OK;
            break;
        }
    }
    for (int k = 0; k < 10; k++) {
        t.replicas *= 2;
        if (!divides(&cfg, t.replicas * t.local_ranks)) break;
        if ((rc = mem_for(&cfg, &t, &m, err, errlen))) return rc;
        if ((double)m.total_bytes <= p->device_bytes) {
            snprintf(what, sizeof what, "replicas=%d", t.replicas);
            add_change(p, what, &m);
            return VJ_OK;
        }
    }
    return VJ_OK;
}

vj_err jobplan_make(const vit_job_config *cfg, const jobplan_target *t, jobplan *p, char *err,
                    size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->suggestion = -1;
    const int world = t->replicas * t->local_ranks;
    if (t->replicas < 1 || t->local_ranks < 1) {
        snprintf(err, errlen, "--replicas %d --local-ranks %d: both must be at least 1",
                 t->replicas, t->local_ranks);
        return VJ_ERR_CONFIG;
    }
    if (!divides(cfg, world)) {
        snprintf(err, errlen, "training.globalBatchSize=%d is not a multiple of "
                 "training.microBatchSize=%d x %d ranks", cfg->training.global_batch_size,
                 cfg->training.micro_batch_size, world);
        return VJ_ERR_CONFIG;
    }
    const jobplan_gpu *g = NULL;
    if (t->gpu && !(g = jobplan_gpu_of(t->gpu_kind))) {
        snprintf(err, errlen, "--gpu %s: not one of h100, h200, a100, v100", t->gpu_kind);
        return VJ_ERR_CONFIG;
    }
    vj_err rc = mem_for(cfg, t, &p->mem, err, errlen);
    if (rc) return rc;
    const training_config *tc = &cfg->training;
    p->world = world;
    p->micro = tc->micro_batch_size;
    p->global_batch = tc->global_batch_size;
    p->accum = tc->global_batch_size / (tc->micro_batch_size * world);
    /* memory per rank */
    if (t->device_bytes > 0) {
        p->device_bytes = t->device_bytes;
    } else if (g) {
        p->device_bytes = g->memory;
    } else {
        long long avail = sysres_memory_available("", NULL, 0);
        p->device_bytes = avail > 0 ? (double)avail / t->local_ranks : 0;
    }
    if (g)
        snprintf(p->device, sizeof p->device, "cuda %s, %.0f GB per rank", g->kind,
                 p->device_bytes / 1e9);
    else
        snprintf(p->device, sizeof p->device, "cpu, %.2f GB per rank (%s)", p->device_bytes / 1e9,
                 t->device_bytes > 0 ? "given" : "available to this process / local ranks");
    p->fits = p->device_bytes <= 0 || (double)p->mem.total_bytes <= p->device_bytes;
    jobplan_time(cfg, t, g, p);
    if (!p->fits && (rc = suggest(cfg, t, p, err, errlen))) return rc;
    return VJ_OK;
}

vj_err jobplan_elastic_make(const vit_job_config *unfinished, const jobplan_target *t,
                            const jobplan *at, int min_replicas, jobplan_elastic *out, char *err,
                            size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->min_replicas = min_replicas;
    out->replicas = t->replicas;
    if (min_replicas < 1 || min_replicas > t->replicas) {
        snprintf(err, errlen, "spec.elastic.minReplicas=%d: must be in [1, replicas=%d]",
                 min_replicas, t->replicas);
        return VJ_ERR_CONFIG;
    }
    vit_job_config *cfg = malloc(sizeof *cfg);
    jobplan *p = malloc(sizeof *p);
    vj_err rc = VJ_OK;
    if (!cfg || !p) {
        snprintf(err, errlen, "plan: out of memory planning the elastic sizes");
        rc = VJ_ERR_OUT_OF_MEMORY;
        goto out;
    }
    char why[256];
    for (int r = min_replicas; r < t->replicas; r++) {
        *cfg = *unfinished;
        cfg->world_size = r * t->local_ranks;
        if (config_finish(cfg, why, sizeof why) != VJ_OK) continue; /* not an allowed size */
        if (out->n_sizes == JOBPLAN_MAX_SIZES) {
            out->not_evaluated++;
            continue;
        }
        jobplan_target tr = *t;
        tr.replicas = r;
        if ((rc = jobplan_make(cfg, &tr, p, err, errlen)) != VJ_OK) goto out;
        out->sizes[out->n_sizes++] = (jobplan_size){
            .replicas = r, .world = p->world, .micro = p->micro, .accum = p->accum,
            .total_bytes = p->mem.total_bytes, .fits = p->fits, .images_per_s = p->images_per_s};
    }
    /* down from replicas while each size fits */
    out->smallest_fitting = at->fits ? t->replicas : 0;
    for (int i = out->n_sizes - 1; i >= 0 && out->smallest_fitting > 0 && out->sizes[i].fits; i--)
        out->smallest_fitting = out->sizes[i].replicas;
out:
    free(cfg);
    free(p);
    return rc;
}
