/* operator/planner.h - a job's plan at admission, made by the worker's own
 * sizing code: `vitjob-worker plan --json` run as a child process
 * (docs/design.md, "Admission: will it fit?").
 *
 * Owns: running the planner program on the job's worker config (on its
 * stdin) with the job's world, GPU kind and memory, under a time limit, and
 * reading its JSON into the summary decide reads (vj_admission).
 * Must not: link or include the worker's code (the planner is a separate
 * program, so the operator never carries a second memory formula that could
 * drift from the allocations it sizes), talk to the API server, or decide
 * anything about the job (decide.c owns the WillNotFit rule).
 *
 * Errors: functions return 0, or -1 with a one-line message in err naming
 * the planner and what went wrong (its exit status and last log line).
 */
#ifndef VITJOB_PLANNER_H
#define VITJOB_PLANNER_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* How long the planner may run before it is killed (it builds the model's
 * layout and the strategy's plan: milliseconds, even for 120B parameters). */
#define VJ_PLANNER_TIMEOUT_S 10

/* What the plan says of one rank of the job, as decide reads it. */
typedef struct {
    long long generation;     /* metadata.generation of the spec planned */
    int fits;                 /* 0: memory_bytes > device_bytes; 1: fits, or the device's
                                 memory is unknown (device_bytes 0) */
    double memory_bytes;      /* everything one rank needs of its GPU's memory */
    double device_bytes;      /* the GPU memory it was compared with; 0 = unknown */
    double images_per_s;      /* the whole job's, at the device's rate */
    char device[96];          /* the planner's words, e.g. "cuda h100 (80 GB, ...)" */
    char device_source[192];  /* where device_bytes came from, e.g. "spec.gpuMemory=80Gi" */
    char parts[256];          /* the largest parts, e.g. "activations 98.0 GiB, optimizer
                                 state 4.7 GiB, ..." */
    char sharding[16];        /* the strategy planned: none, grad-op, full */
    int micro_batch;          /* training.microBatchSize planned */
    char suggestion[384];     /* when it does not fit: the cheapest changes that make it fit,
                                 in the spec's words, with the new total; "" when none does */
    int replicas;             /* the replicas planned */
    /* spec.elastic (issue 44): the plan at the fewest replicas the job may
     * be shrunk to (the smallest allowed size from minReplicas), the JSON's
     * "elastic"; min_replicas 0: no elastic plan (none asked, or the
     * planner gave none) */
    struct {
        int min_replicas;     /* spec.elastic.minReplicas planned */
        int replicas, world;  /* the fewest replicas allowed from it; 0: none is allowed */
        int micro_batch, accumulation;
        double memory_bytes;  /* one rank's peak there */
        int fits;             /* as fits above, at that size */
        int smallest_fitting; /* the fewest replicas from which every allowed size fits */
    } elastic;
} vj_admission;

typedef struct {
    const char *program;      /* the planner: a vitjob-worker binary */
    int replicas, local_ranks;
    const char *gpu_kind;     /* "h100", "h200", "a100", "v100"; NULL = the planner's default */
    double gpu_bytes;         /* memory per GPU; 0 = unknown (nothing is refused) */
    const char *gpu_source;   /* where gpu_bytes came from (copied into device_source) */
    int timeout_s;            /* 0 = VJ_PLANNER_TIMEOUT_S */
    int min_replicas;         /* spec.elastic.minReplicas (--min-replicas); 0 = not elastic */
} vj_planner_args;

/* Runs `program plan --config - --replicas R --local-ranks L [--min-replicas M]
 * --device cuda [--gpu K] [--gpu-memory B] --json` with worker_config (the
 * worker's part of the spec, vj_jobspec_worker_config) written to its
 * stdin, and reads the plan into *out (generation left 0). */
int vj_planner_run(const vj_planner_args *a, const cJSON *worker_config, vj_admission *out,
                   char *err, size_t errlen);

/* Reads the planner's JSON (the keys of worker/plan/plan_output.c's
 * jobplan_json) into *out; device_bytes as given to the planner (0 =
 * unknown: then fits is 1 whatever the planner said). Exposed for tests. */
int vj_planner_parse(const char *json, double device_bytes, vj_admission *out, char *err,
                     size_t errlen);

/* A size as a quantity rounded for people: "22.4Gi", "512.3Mi", "900Ki". */
void vj_planner_quantity(char *buf, size_t len, double bytes);

#endif
