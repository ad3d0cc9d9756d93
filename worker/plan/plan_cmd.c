/* worker/plan/plan_cmd.c - see plan_cmd.h.
 * Must not: plan, measure or print beyond calling jobplan.h, plan_probe.h
 * and plan_output.h. */
#include "plan_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"

#include "config.h"
#include "dp.h"
#include "exitcode.h"
#include "jobplan.h"
#include "log.h"
#include "ops.h"
#include "plan_memory.h"
#include "plan_output.h"
#include "plan_probe.h"
#include "sysres.h"

static void usage(FILE *to)
{
    fprintf(to,
            "usage: vitjob-worker plan [--config FILE|-] [--set key=value ...] [--replicas N]\n"
            "                          [--min-replicas N] [--local-ranks N] [--device cpu|cuda] [--gpu h100|h200|a100|v100]\n"
            "                          [--gpu-memory SIZE] [--flops RATE] [--bus-bw RATE]\n"
            "                          [--threads N] [--measure] [--json]\n"
            "\n"
            "What one rank of the job needs (memory by part, against the device's), how long\n"
            "a step takes and how many images per second follow, and when it does not fit,\n"
            "the cheapest changes that make it fit. SIZE: bytes, or with K, M, G, T (1000s)\n"
            "or Ki, Mi, Gi, Ti (1024s), e.g. 80G. RATE: FLOP/s or bytes/s, e.g. 2.5e11.\n"
            "--measure (CPU): the model's forward and backward of one micro-batch and its\n"
            "optimizer step, timed in as many processes at once as there are local ranks\n"
            "(they share this machine's cores), and all-reduces on loopback between the\n"
            "ranks (all of them with one replica, else two): the bus bandwidth and the\n"
            "latency of a call.\n"
            "A ViTJob manifest as --config plans the job it describes: spec.replicas,\n"
            "spec.gpusPerReplica (ranks per pod, on the GPU) and spec.gpuMemory stand for\n"
            "--replicas, --local-ranks, --device cuda and --gpu-memory unless those are given,\n"
            "and spec.elastic.minReplicas for --min-replicas.\n"
            "--min-replicas N (an elastic job, N below --replicas): the job is also planned at\n"
            "each replica count in [N, replicas) that divides the global batch into whole\n"
            "micro-batches per rank (the sizes it may be shrunk to; the global batch kept,\n"
            "more accumulation), a line each, and a warning when the fewest does not fit\n"
            "although replicas does (sharded modes need more per rank on fewer ranks).\n");
}

/* "80G", "80GB", "64Gi", "1.5e9": bytes; -1 when not a size */
static double parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    double k = 1000;
    if (end[0] && end[1] == 'i') k = 1024;
    double mul = 1;
    switch (end[0]) {
    case 0: return v;
    case 'K': case 'k': mul = k; break;
    case 'M': mul = k * k; break;
    case 'G': mul = k * k * k; break;
    case 'T': mul = k * k * k * k; break;
    default: return -1;
    }
    const char *rest = end + 1 + (k == 1024);
    if (*rest == 'B') rest++;
    return *rest ? -1 : v * mul;
}

/* `--config -`: the config from standard input (the operator's admission
 * pipes the job's spec in: operator/planner.h). */
static vj_err load_stdin(vit_job_config *cfg, char *err, size_t errlen)
{
    buf b = {0};
    char chunk[4096];
    ssize_t n;
    while ((n = read(0, chunk, sizeof chunk)) > 0)
        if (buf_append(&b, chunk, (size_t)n) != 0) {
            buf_free(&b);
            snprintf(err, errlen, "plan: out of memory reading the config from stdin");
            return VJ_ERR_OUT_OF_MEMORY;
        }
    if (n < 0) {
        buf_free(&b);
        snprintf(err, errlen, "plan: cannot read the config from stdin");
        return VJ_ERR_CONFIG;
    }
    vj_err rc = config_load_string(cfg, b.data ? b.data : "", b.len, "stdin", err, errlen);
    buf_free(&b);
    return rc;
}

static int whole(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* spec.replicas, spec.gpusPerReplica, spec.gpuMemory and
 * spec.elastic.minReplicas of a ViTJob manifest (config.h's spec_scale)
 * onto the target where the flags left them: gpusPerReplica ranks per pod on the GPU, one on the CPU, as the
 * operator runs them. */
static vj_err manifest_scale(const vit_job_config *cfg, jobplan_target *t, int given,
                             int *device_set, int *min_replicas, char *err, size_t errlen)
{
    const int reps = cfg->spec_scale.replicas, gpus = cfg->spec_scale.gpus_per_replica;
    if (!(given & 1) && reps > 0) t->replicas = reps;
    if (!(given & 8) && cfg->spec_scale.min_replicas > 0) *min_replicas = cfg->spec_scale.min_replicas;
    if (!(given & 2) && gpus > 0) t->local_ranks = gpus;
    if (!*device_set && gpus > 0) t->gpu = 1, *device_set = 1;
    if (!(given & 4) && cfg->spec_scale.gpu_memory[0]) {
        double x = parse_size(cfg->spec_scale.gpu_memory);
        if (x <= 0) {
            snprintf(err, errlen, "spec.gpuMemory=\"%s\": a size, e.g. 80G or 80Gi",
                     cfg->spec_scale.gpu_memory);
            return VJ_ERR_CONFIG;
        }
        t->device_bytes = x;
    }
    if (reps > 0 || gpus > 0)
        LOG_INFO("plan", "event=manifest_scale replicas=%d local_ranks=%d gpu=%d", t->replicas,
                 t->local_ranks, t->gpu);
    return VJ_OK;
}

static vj_err run_plan(int argc, char **argv, char *err, size_t errlen)
{
    static vit_job_config cfg;
    config_defaults(&cfg);
    const char *config_path = NULL;
    jobplan_target t = {.replicas = 1, .local_ranks = 1};
    int json = 0, measure = 0, device_set = 0, rate_probed = 0, bus_probed = 0,
        optim_probed = 0, call_probed = 0;
    int scale_set = 0; /* 1 --replicas, 2 --local-ranks, 4 --gpu-memory, 8 --min-replicas given */
    int min_replicas = 0; /* an elastic job's spec.elastic.minReplicas; 0: not elastic */
    log_set_level_name("warn"); /* the probes' rendezvous lines stay out of the output */
    vj_err rc;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--measure") == 0) {
            measure = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return VJ_OK;
        } else if (!v) {
            usage(stderr);
            snprintf(err, errlen, "plan: unknown or incomplete argument '%s'", a);
            return VJ_ERR_USAGE;
        } else if (strcmp(a, "--config") == 0) {
            config_path = v, i++;
        } else if (strcmp(a, "--set") == 0) {
            i++; /* applied after the file */
        } else if (strcmp(a, "--min-replicas") == 0) {
            if (whole(v, 1, 1 << 20, &min_replicas) != 0) {
                snprintf(err, errlen, "%s %s: a whole number from 1", a, v);
                return VJ_ERR_USAGE;
            }
            scale_set |= 8;
            i++;
        } else if (strcmp(a, "--replicas") == 0 || strcmp(a, "--local-ranks") == 0 ||
                   strcmp(a, "--threads") == 0) {
            int *dst = a[2] == 'r' ? &t.replicas : a[2] == 'l' ? &t.local_ranks : &t.threads;
            if (whole(v, 1, 1 << 20, dst) != 0) {
                snprintf(err, errlen, "%s %s: a whole number from 1", a, v);
                return VJ_ERR_USAGE;
            }
            scale_set |= a[2] == 'r' ? 1 : a[2] == 'l' ? 2 : 0;
            i++;
        } else if (strcmp(a, "--device") == 0) {
            if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) {
                snprintf(err, errlen, "--device %s: cpu or cuda", v);
                return VJ_ERR_USAGE;
            }
            t.gpu = strcmp(v, "cuda") == 0;
            device_set = 1;
            i++;
        } else if (strcmp(a, "--gpu") == 0) {
            t.gpu_kind = v, t.gpu = 1, device_set = 1, i++;
        } else if (strcmp(a, "--gpu-memory") == 0 || strcmp(a, "--flops") == 0 ||
                   strcmp(a, "--bus-bw") == 0) {
            double x = parse_size(v);
            if (x <= 0) {
                snprintf(err, errlen, "%s %s: a positive number, e.g. 80G or 2.5e11", a, v);
                return VJ_ERR_USAGE;
            }
            if (a[2] == 'g') t.device_bytes = x, scale_set |= 4;
            else if (a[2] == 'f') t.flops_per_s = x;
            else t.bus_bytes_per_s = x;
            i++;
        } else {
            usage(stderr);
            snprintf(err, errlen, "plan: unknown argument '%s'", a);
            return VJ_ERR_USAGE;
        }
    }
    if (config_path && strcmp(config_path, "-") == 0) {
        if ((rc = load_stdin(&cfg, err, errlen)) != VJ_OK) return rc;
    } else if (config_path && (rc = config_load_file(&cfg, config_path, err, errlen)) != 0) {
        return rc;
    }
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            if ((rc = config_set(&cfg, argv[++i], err, errlen)) != 0) return rc;
        } else if (strcmp(argv[i], "--json") != 0 && strcmp(argv[i], "--measure") != 0) {
            i++;
        }
    }
    /* a ViTJob manifest's own scale, where no flag says otherwise: the job
     * the operator would admit (replicas x gpusPerReplica ranks) */
    if ((rc = manifest_scale(&cfg, &t, scale_set, &device_set, &min_replicas, err, errlen)) !=
        VJ_OK)
        return rc;
    if (!device_set) t.gpu = cfg.training.device == DEVICE_CUDA;
    /* the config before the world's defaults: an elastic job's other sizes
     * are finished from it (jobplan_elastic_make) */
    static vit_job_config unfinished;
    unfinished = cfg;
    cfg.world_size = t.replicas * t.local_ranks;
    if ((rc = config_finish(&cfg, err, errlen)) != 0) return rc;
    int copies = 1, probe_ranks = 0, sched_probed = 0;
    double gap_s = 0;
    if (measure && !t.gpu) {
        int threads = t.threads > 0 ? t.threads : cfg.training.threads;
        if (threads <= 0) threads = ops_cpu_set_threads(0) / t.local_ranks;
        if (threads < 1) threads = 1;
        t.threads = threads;
        /* the local ranks share this machine's cores: as many copies of the
         * step probe run at once, as far as the memory holds them */
        copies = t.local_ranks;
        jobplan_mem one;
        long long avail = sysres_memory_available("", NULL, 0);
        if (copies > 1 && avail > 0 &&
            jobplan_memory(&cfg, jobplan_cpu_ops(cfg.training.precision), 1, 0, 0, threads, &one,
                           err, errlen) == VJ_OK &&
            one.total_bytes > 0 && (double)one.total_bytes * copies > (double)avail)
            copies = (int)((double)avail / (double)one.total_bytes);
        if (copies < 1) copies = 1;
        if (copies > 64) copies = 64;
        jobplan_step_probe pr;
        if (t.flops_per_s <= 0 || t.optim_s_per_param <= 0) {
            if (jobplan_probe_step(&cfg, threads, copies, 1.0, &pr, err, errlen) != 0)
                return VJ_ERR_OUT_OF_MEMORY;
            if (t.flops_per_s <= 0) t.flops_per_s = pr.flops_per_s, rate_probed = 1;
            if (t.optim_s_per_param <= 0) t.optim_s_per_param = pr.optim_s_per_param, optim_probed = 1;
        }
        /* then the collectives: forked ranks (they run no OpenMP), every
         * rank when all are on this machine (one replica), else two; each
         * timed call after as much busy time as the run computes between
         * two of its calls (the step's compute at the rate just probed /
         * the strategy's calls per step) */
        if (cfg.world_size > 1 && (t.bus_bytes_per_s <= 0 || t.call_s <= 0)) {
            double bus = 0, call = 0, gap = 0;
            static jobplan pre;
            if (jobplan_make(&cfg, &t, &pre, err, errlen) == VJ_OK && pre.comm_calls > 0)
                gap = pre.compute_s / pre.comm_calls;
            probe_ranks = t.replicas == 1 && cfg.world_size <= 64 ? cfg.world_size : 2;
            /* a strategy with its own schedule (full's communication
             * thread): that schedule, each unit's compute spun at the
             * probed rate, and its calls' time per call */
            const int own = dp_has_schedule(cfg.training.sharding);
            if (jobplan_probe_collectives((size_t)32 << 20, probe_ranks, gap, &bus,
                                          own ? NULL : &call, err, errlen) != 0)
                return VJ_ERR_PEER_LOST;
            double exposed = 0;
            if (own) {
                if (jobplan_probe_schedule(&cfg, probe_ranks, t.flops_per_s, 1.5, &exposed, err,
                                           errlen) != 1)
                    return VJ_ERR_PEER_LOST;
                call = pre.comm_calls > 0 ? exposed / pre.comm_calls : 0;
                sched_probed = 1;
            }
            if (t.bus_bytes_per_s <= 0) t.bus_bytes_per_s = bus, bus_probed = 1;
            if (t.call_s <= 0) t.call_s = call, call_probed = 1;
            gap_s = gap;
        }
    }
    jobplan p;
    if ((rc = jobplan_make(&cfg, &t, &p, err, errlen)) != VJ_OK) return rc;
    if (rate_probed)
        snprintf(p.rate_source, sizeof p.rate_source,
                 "measured: forward+backward probe, %d threads, %d of %d local ranks at once",
                 t.threads, copies, t.local_ranks);
    if (optim_probed)
        snprintf(p.optim_source, sizeof p.optim_source,
                 "measured: zeroing+clipping+AdamW probe, %d of %d local ranks at once", copies,
                 t.local_ranks);
    if (bus_probed)
        snprintf(p.bus_source, sizeof p.bus_source, "measured: loopback all-reduce, 32 MiB, %d ranks",
                 probe_ranks);
    if (call_probed && sched_probed)
        snprintf(p.call_source, sizeof p.call_source,
                 "measured: the strategy's own step on loopback, %d ranks, each unit's compute "
                 "spun at the probed rate", probe_ranks);
    else if (call_probed)
        snprintf(p.call_source, sizeof p.call_source,
                 "measured: loopback all-reduce of 64 floats, %d ranks, %.2g ms busy between calls",
                 probe_ranks, gap_s * 1e3);
    static jobplan_elastic el;
    const int elastic = min_replicas > 0 && min_replicas != t.replicas;
    if (elastic &&
        (rc = jobplan_elastic_make(&unfinished, &t, &p, min_replicas, &el, err, errlen)) != VJ_OK)
        return rc;
    if (json) {
        char *s = jobplan_json(&p, elastic ? &el : NULL);
        if (!s) {
            snprintf(err, errlen, "plan: out of memory writing the JSON");
            return VJ_ERR_OUT_OF_MEMORY;
        }
        printf("%s\n", s);
        free(s);
    } else {
        jobplan_print(stdout, &p, elastic ? &el : NULL);
    }
    return VJ_OK;
}

int plan_cmd_main(int argc, char **argv)
{
    char err[1024] = "";
    vj_err e = run_plan(argc, argv, err, sizeof err);
    int code = vj_exit_code(e, 0);
    if (e != VJ_OK) {
        const vj_err_row *row = vj_err_info(e);
        LOG_ERROR("worker", "exit_code=%d class=%s msg=%s", code, LOGV(row ? row->name : "unknown"),
                  LOGV(err));
    }
    return code;
}
