/* worker/main.c - the vitjob-worker command line.
 *
 * Owns: the table of subcommands (the usage text is printed from it),
 * argument parsing, the environment contract of docs/design.md
 * (VITJOB_REPLICAS, VITJOB_LOCAL_RANKS, ...), the check of every output
 * path before any work, signal handling (handlers only set a flag) and the
 * process exit code, from the error class through api/exitcode.h (one
 * helper, exit_with, for every subcommand).
 * Must not: train, pick a backend (worker/train/train.c), start the gang
 * itself (worker/gang/gang.h) or parse config files itself (api/config_load.c).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "ckpt.h"
#include "config.h"
#include "config_schema.h"
#include "contract.h"
#include "exitcode.h"
#include "file.h"
#include "gang.h"
#include "log.h"
#include "lostpeer.h"
#include "model_io.h"
#include "ops.h"
#include "plan_cmd.h"
#include "shardwriter.h"
#include "stdfds.h"
#include "termmsg.h"
#include "train.h"
#include "version.h"


/* The signal that asked the run to stop (SIGTERM, SIGINT), or 0. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) { stop_requested = sig; }

/* The whole command line, for the local agent to run again. */
static char **main_argv;
/* The local agent's exit code for the pod (it decides it from its
 * children's), or -1 when this process trained itself. */
static int agent_code = -1;

static void usage(FILE *to); /* from the table of subcommands, at the end */

/* The table of api/exitcode.h, for users and for the tests that walk it. */
static vj_err cmd_exit_codes(int argc, char **argv, char *err, size_t errlen)
{
    (void)argc, (void)argv, (void)err, (void)errlen;
    size_t n;
    const vj_err_row *t = vj_err_table(&n);
    printf("%-5s %-10s %-14s %s\n", "CODE", "RETRIED", "CLASS", "MEANING");
    printf("%-5d %-10s %-14s %s\n", vj_exit_code(VJ_OK, 0), "-", "ok", "training finished");
    for (size_t i = 0; i < n; i++)
        printf("%-5d %-10s %-14s %s\n", t[i].exit_code, t[i].permanent ? "no" : "yes", t[i].name,
               t[i].meaning);
    return 0;
}

/* This process's place in the job: the operator's environment contract. */
typedef struct {
    int world, rank, local_ranks;
    int pod_rank, agent; /* agent: local ranks > 1 and none given: start them */
    long generation;
    const char *endpoint;
} placement;

/* An integer environment variable in [lo, hi]; absent = def. */
static vj_err env_long(const char *name, long lo, long hi, long def, long *out, char *err,
                       size_t errlen)
{
    const char *s = getenv(name);
    *out = def;
    if (!s || !*s) return VJ_OK;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < lo || v > hi) {
        snprintf(err, errlen, "environment: %s=\"%s\" is not an integer in [%ld, %ld]", name, s,
                 lo, hi);
        return VJ_ERR_ENVIRONMENT;
    }
    *out = v;
    return VJ_OK;
}

/* The place from the operator's env contract (rank 0 of 1 when run by
 * hand): world size = replicas x local ranks. */
static vj_err env_placement(placement *pl, char *err, size_t errlen)
{
    long replicas = 1, local = 1, rank = 0, gen = 0, local_rank = -1;
    vj_err rc;
    if ((rc = env_long(VJ_ENV_REPLICAS, 1, 65536, 1, &replicas, err, errlen)) ||
        (rc = env_long(VJ_ENV_LOCAL_RANKS, 1, 65536, 1, &local, err, errlen)) ||
        (rc = env_long(VJ_ENV_RANK, 0, 65535, 0, &rank, err, errlen)) ||
        (rc = env_long(VJ_ENV_LOCAL_RANK, 0, 65535, -1, &local_rank, err, errlen)) ||
        (rc = env_long(VJ_ENV_RESTART, 0, 1000000000, 0, &gen, err, errlen)))
        return rc;
    if (local_rank >= local) {
        snprintf(err, errlen, "environment: %s=%ld is not below %s=%ld", VJ_ENV_LOCAL_RANK,
                 local_rank, VJ_ENV_LOCAL_RANKS, local);
        return VJ_ERR_ENVIRONMENT;
    }
    if (replicas * local > 65536) {
        snprintf(err, errlen, "environment: %s=%ld x %s=%ld processes is more than 65536",
                 VJ_ENV_REPLICAS, replicas, VJ_ENV_LOCAL_RANKS, local);
        return VJ_ERR_ENVIRONMENT;
    }
    if (rank >= replicas) {
        snprintf(err, errlen, "environment: %s=%ld is not below %s=%ld", VJ_ENV_RANK, rank,
                 VJ_ENV_REPLICAS, replicas);
        return VJ_ERR_ENVIRONMENT;
    }
    pl->world = (int)(replicas * local);
    pl->pod_rank = (int)rank;
    pl->agent = local > 1 && local_rank < 0;
    pl->rank = (int)(rank * local + (local_rank > 0 ? local_rank : 0));
    pl->local_ranks = (int)local;
    pl->generation = gen;
    pl->endpoint = getenv(VJ_ENV_RDZV_ENDPOINT);
    return VJ_OK;
}

/* What this build can run with many ranks. */
static vj_err check_supported(const vit_job_config *cfg, const placement *pl, char *err,
                              size_t errlen)
{
    if (cfg->world_size == 1) return VJ_OK;
    if (!pl->endpoint || !*pl->endpoint) {
        snprintf(err, errlen, "environment: world size %d needs %s (host:port of rank 0's "
                 "store)", cfg->world_size, VJ_ENV_RDZV_ENDPOINT);
        return VJ_ERR_ENVIRONMENT;
    }
    return VJ_OK;
}

/* Every output path, checked before any work: a run must not train for
 * hours and then fail on a path it could have refused at once. */
static vj_err check_outputs(const vit_job_config *cfg, const char *metrics, char *err,
                            size_t errlen)
{
    struct stat a, b;
    if (metrics && cfg->training.export_path[0] &&
        (strcmp(metrics, cfg->training.export_path) == 0 ||
         (stat(metrics, &a) == 0 && stat(cfg->training.export_path, &b) == 0 &&
          a.st_dev == b.st_dev && a.st_ino == b.st_ino))) {
        snprintf(err, errlen, "--metrics %s and training.exportPath name the same file", metrics);
        return VJ_ERR_OUTPUT;
    }
    const struct {
        const char *what, *path;
    } outs[] = {{"training.exportPath", cfg->training.export_path}, {"--metrics", metrics}};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
        if (!outs[i].path || !outs[i].path[0]) continue;
        char why[900];
        int removed = 0;
        if (file_check_output(outs[i].path, &removed, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s: %s", outs[i].what, why);
            return VJ_ERR_OUTPUT;
        }
        if (removed)
            LOG_INFO("worker", "event=removed_temporaries path=%s count=%d reason=\"left by a "
                     "writer that died\"", LOGV(outs[i].path), removed);
    }
    return VJ_OK;
}

static vj_err cmd_train(int argc, char **argv, char *err, size_t errlen)
{
    const char *config_path = NULL, *metrics = NULL;
    vj_err rc;
    static vit_job_config cfg;
    config_defaults(&cfg);

    /* First, so that a SIGTERM while the config and data load is honoured. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* A peer that dies mid-collective closes its sockets: the write to it
     * must fail with EPIPE (peer_lost, retried), not kill this rank. */
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    /* First pass: flags that do not depend on the config. */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(a, "--config") == 0 && has_value) {
            config_path = argv[++i];
        } else if (strcmp(a, "--metrics") == 0 && has_value) {
            metrics = argv[++i];
        } else if (strcmp(a, "--log-level") == 0 && has_value) {
            if (log_set_level_name(argv[++i]) != 0) {
                snprintf(err, errlen, "--log-level: unknown level '%s'", argv[i]);
                return VJ_ERR_USAGE;
            }
        } else if (strcmp(a, "--set") == 0 && has_value) {
            i++; /* applied after the file */
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return VJ_OK;
        } else {
            usage(stderr);
            snprintf(err, errlen, "train: unknown or incomplete argument '%s'", a);
            return VJ_ERR_USAGE;
        }
    }
    if (config_path && (rc = config_load_file(&cfg, config_path, err, errlen)) != 0) return rc;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            if ((rc = config_set(&cfg, argv[++i], err, errlen)) != 0) return rc;
        } else if (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--metrics") == 0 ||
                   strcmp(argv[i], "--log-level") == 0) {
            i++;
        }
    }
    placement pl = {0};
    if ((rc = env_placement(&pl, err, errlen)) != 0) return rc;
    cfg.world_size = pl.world;
    if ((rc = config_finish(&cfg, err, errlen)) != 0) return rc;

    if ((rc = check_supported(&cfg, &pl, err, errlen)) != 0) return rc;
    if (pl.agent) { /* the config is good: start the pod's local ranks */
        agent_options ao = {.local_ranks = pl.local_ranks, .pod_rank = pl.pod_rank,
                            .argv = main_argv, .threads_set = cfg.training.threads > 0,
                            .grace_s = 30, .stop = &stop_requested};
        agent_code = agent_run(&ao, err, errlen);
        return VJ_OK;
    }
    if (pl.rank == 0 && (rc = check_outputs(&cfg, metrics, err, errlen)) != VJ_OK) return rc;

    char *json = config_to_json(&cfg);
    if (json) {
        /* the whole config is longer than LOGV's values: a buffer of its own */
        LOG_INFO("worker", "event=config version=%s config=%s", LOGV(VJ_RELEASE),
                 log_value((char[3072]){0}, 3072, json));
        free(json);
    }
    train_options opt = {.metrics_path = metrics, .stop_flag = &stop_requested,
                         .rank = pl.rank, .world = cfg.world_size,
                         .generation = pl.generation};
    if (cfg.world_size == 1) return train_run(&cfg, &opt, err, errlen);
    /* the backend first: it picks the collectives (NCCL for GPU buffers,
     * gloo for host memory), and a missing GPU fails before the rendezvous */
    if ((rc = train_pick_backend(&opt.ops, &cfg.training, err, errlen)) != VJ_OK) return rc;

    /* many ranks: meet at rank 0's store, start the heartbeat, connect the
     * collectives (worker/gang/gang.h); a lost peer ends this process from
     * the heartbeat's thread (lostpeer.h), whatever training is doing */
    static lostpeer_ctx lctx;
    lctx = (lostpeer_ctx){.rank = pl.rank, .local_ranks = pl.local_ranks,
                          .generation = pl.generation};
    gang_options go = {.endpoint = pl.endpoint, .rank = pl.rank, .world_size = cfg.world_size,
                       .generation = pl.generation,
                       .rendezvous_timeout_s = cfg.training.rendezvous_timeout_seconds,
                       .heartbeat_timeout_s = cfg.training.heartbeat_timeout_seconds,
                       .collective_timeout_s = cfg.training.collective_timeout_seconds,
                       .gpu = opt.ops->gpu, .on_verdict = lostpeer_on_verdict, .ctx = &lctx,
                       .stop = &stop_requested};
    gang *g = NULL;
    if ((rc = gang_start(&g, &go, err, errlen)) != VJ_OK) return rc;
    opt.comm = gang_comm(g);
    opt.rdzv = gang_rdzv(g);
    opt.hb = gang_hb(g);
    rc = train_run(&cfg, &opt, err, errlen);
    gang_stop(g, rc == VJ_ERR_PEER_LOST, err, errlen);
    gang_free(g);
    return rc;
}


/* The checkpoints a --uri/--from names: s3://bucket/prefix, file:///dir, or
 * a plain path (as model.init takes them), made file:// of its absolute
 * form; out holds the URI. */
static vj_err ckpt_location(const char *flag, const char *in, char *out, size_t len, char *err,
                            size_t errlen)
{
    const char *scheme = strstr(in, "://");
    if (scheme && strncmp(in, "s3://", 5) != 0 && strncmp(in, "file://", 7) != 0) {
        snprintf(err, errlen, "%s %s: expected a path, file:///path or s3://bucket/prefix", flag,
                 in);
        return VJ_ERR_USAGE;
    }
    char cwd[4096] = "";
    if (!scheme && in[0] != '/' && !getcwd(cwd, sizeof cwd)) {
        snprintf(err, errlen, "%s %s: cannot resolve a relative path: %s", flag, in,
                 strerror(errno));
        return VJ_ERR_USAGE;
    }
    int n = scheme ? snprintf(out, len, "%s", in)
                   : snprintf(out, len, "file://%s%s%s", cwd, cwd[0] ? "/" : "", in);
    if (n < 0 || (size_t)n >= len) {
        snprintf(err, errlen, "%s: the location is too long (%zu bytes)", flag, strlen(in));
        return VJ_ERR_USAGE;
    }
    return VJ_OK;
}

/* --uri/--from (into uri, a URI: ckpt_location), --out, --endpoint of the
 * checkpoint commands; -h/--help sets *help (the usage is printed). */
static vj_err ckpt_args(int argc, char **argv, const char *from_flag, char *uri, size_t urilen,
                        const char **out, const char **endpoint, int *help, char *err,
                        size_t errlen)
{
    const char *from = NULL;
    *help = 0;
    for (int i = 0; i < argc; i++) {
        int has = i + 1 < argc;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            *help = 1;
            return VJ_OK;
        } else if (strcmp(argv[i], from_flag) == 0 && has)
            from = argv[++i];
        else if (out && strcmp(argv[i], "--out") == 0 && has)
            *out = argv[++i];
        else if (strcmp(argv[i], "--endpoint") == 0 && has)
            *endpoint = argv[++i];
        else if (strcmp(argv[i], "--log-level") == 0 && has)
            log_set_level_name(argv[++i]);
        else {
            snprintf(err, errlen, "unknown or incomplete argument '%s'", argv[i]);
            return VJ_ERR_USAGE;
        }
    }
    if (!from || (out && !*out)) {
        snprintf(err, errlen, "%s URI%s is required", from_flag, out ? " and --out FILE" : "");
        return VJ_ERR_USAGE;
    }
    return ckpt_location(from_flag, from, uri, urilen, err, errlen);
}

static vj_err store_class(ckpt_status st)
{
    return st == CKPT_RETRY ? VJ_ERR_IO : st == CKPT_NOT_FOUND ? VJ_ERR_DATA : VJ_ERR_CONFIG;
}

/* `vitjob-worker checkpoints --uri URI`: every step and its state. */
static vj_err cmd_checkpoints(int argc, char **argv, char *err, size_t errlen)
{
    char uri[4096];
    const char *endpoint = "";
    int help;
    vj_err rc = ckpt_args(argc, argv, "--uri", uri, sizeof uri, NULL, &endpoint, &help, err,
                          errlen);
    if (rc || help) return rc;
    ckpt_store *s = NULL;
    ckpt_status st = ckpt_store_open(&s, uri, endpoint, err, errlen);
    if (st == CKPT_OK) st = ckpt_describe(s, stdout, err, errlen);
    ckpt_store_free(s);
    return st ? store_class(st) : VJ_OK;
}

/* `vitjob-worker export --from URI[/step-N] --out FILE`: the parameters of
 * a complete checkpoint (the newest, or step N) as timm-named safetensors:
 * the EMA of the weights where the step has one (training.ema: what the
 * run's own export writes), the weights themselves with --raw or without. */
static vj_err cmd_export(int argc, char **argv, char *err, size_t errlen)
{
    char from[4096];
    const char *out = NULL, *endpoint = "";
    int raw = 0, k = 0, help;
    char **args = malloc(sizeof *args * (size_t)(argc + 1));
    if (!args) {
        snprintf(err, errlen, "out of memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--raw") == 0) raw = 1;
        else args[k++] = argv[i];
    }
    vj_err rc = ckpt_args(k, args, "--from", from, sizeof from, &out, &endpoint, &help, err,
                          errlen);
    free(args);
    if (rc || help) return rc;
    char root[4096];
    long step = -1;
    snprintf(root, sizeof root, "%s", from);
    size_t n = strlen(root);
    while (n > 0 && root[n - 1] == '/') root[--n] = '\0';
    char *last = strrchr(root, '/');
    char tail;
    if (last && sscanf(last + 1, "step-%ld%c", &step, &tail) == 1) *last = '\0';
    else step = -1;
    ckpt_store *s = NULL;
    ckpt_manifest *man = NULL;
    ckpt_status st = ckpt_store_open(&s, root, endpoint, err, errlen);
    if (st == CKPT_OK)
        st = step >= 0 ? ckpt_read_step(s, step, &man, err, errlen) : ckpt_find(s, &man, err, errlen);
    if (st) {
        ckpt_store_free(s);
        if (st == CKPT_NOT_FOUND) { /* where it looked */
            char why[1024];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, errlen, "%s: %s", from, why);
        }
        return store_class(st);
    }
    /* the model the checkpoint was written for */
    static vit_job_config cfg;
    config_defaults(&cfg);
    const ckpt_meta *meta = ckpt_manifest_meta(man);
    cJSON *model = cJSON_Parse(meta->model);
    const cJSON *it;
    char kv[256];
    cJSON_ArrayForEach(it, model) {
        if (!cJSON_IsNumber(it)) continue;
        snprintf(kv, sizeof kv, "model.%s=%.17g", it->string, it->valuedouble);
        if (rc == VJ_OK) rc = config_set(&cfg, kv, err, errlen);
    }
    cJSON_Delete(model);
    vit_model *m = NULL;
    float *host = NULL;
    if (rc == VJ_OK && (rc = model_new(&m, &cfg.model, 1, NULL, ops_cpu(), err, errlen)) == 0) {
        if (model_num_params(m) != meta->n_params) {
            snprintf(err, errlen, "%s: the manifest's model has %zu parameters, not %zu", from,
                     model_num_params(m), meta->n_params);
            rc = VJ_ERR_DATA;
        } else if (!(host = malloc(sizeof(float) * meta->n_params))) {
            snprintf(err, errlen, "out of memory");
            rc = VJ_ERR_OUT_OF_MEMORY;
        } else if ((st = meta->ema && !raw
                              ? ckpt_read_ema(s, man, 0, meta->n_params, host, err, errlen)
                              : ckpt_read_range(s, man, 0, meta->n_params, host, NULL, NULL,
                                                err, errlen)) != CKPT_OK) {
            rc = store_class(st);
        } else {
            model_write_params(m, host);
            char why[900];
            int removed;
            if (file_check_output(out, &removed, why, sizeof why) != 0) {
                snprintf(err, errlen, "--out: %s", why);
                rc = VJ_ERR_OUTPUT;
            } else if (model_save_safetensors(m, &cfg.model, out, err, errlen) != 0) {
                rc = VJ_ERR_OUTPUT;
            } else {
                LOG_INFO("worker", "event=exported step=%ld out=%s params=%zu weights=%s",
                         meta->step, LOGV(out), meta->n_params,
                         meta->ema && !raw ? "ema" : "raw");
            }
        }
    }
    free(host);
    model_free(m);
    ckpt_manifest_free(man);
    ckpt_store_free(s);
    return rc;
}

static void shards_usage(FILE *to)
{
    fprintf(to,
            "usage: vitjob-worker shards --from SRC --out PATTERN\n"
            "                            [--samples-per-shard N | --shard-bytes SIZE]\n"
            "                            [--format jpeg|png] [--quality Q] [--split train|t10k]\n"
            "                            [--shuffle-seed S | --no-shuffle] [--skip-bad]\n"
            "                            [--endpoint URL]\n"
            "                            [--log-level debug|info|warn|error]\n"
            "\n"
            "Writes webdataset tar shards (KEY.cls with the label, KEY.jpg/.jpeg/.png the\n"
            "image), the same bytes for the same input and options. SRC is a directory:\n"
            "  Fashion-MNIST IDX files (<split>-images-idx3-ubyte[.gz] and labels): each\n"
            "    image encoded as grayscale JPEG (--quality, default 95) or PNG; key %%06d,\n"
            "    the index in the split (--split, default train);\n"
            "  else an image folder, root/<class>/<file> (ImageFolder): class index = the\n"
            "    folder's place in bytewise order; .jpg .jpeg .png files copied as they\n"
            "    are, other files skipped; key <class>/<file without extension>. Each\n"
            "    image is decoded first: one that cannot be (truncated, corrupt) stops\n"
            "    the run with exit 3 naming it, or with --skip-bad is skipped and counted.\n"
            "  --format, --quality and --split are for IDX files only: an image folder\n"
            "  refuses them (its files are copied as they are).\n"
            "PATTERN: a path, file:// path or s3://bucket/key (credentials from AWS_*;\n"
            "  --endpoint for a non-AWS store), naming the shards in one of two ways:\n"
            "  with %%d or %%0Nd, e.g. s3://b/fmnist/train-%%06d.tar: shards 0, 1, ... of\n"
            "    --samples-per-shard (default 10000) samples or at most --shard-bytes\n"
            "    (1000000, 64M, 1G, 512Ki, 64Mi) bytes each, as many as that takes;\n"
            "  with data.uri's brace pattern, e.g. 'train-{000000..000003}.tar' (quote\n"
            "    it): exactly the shards it names, the samples dealt evenly over them\n"
            "    (their counts differ by one at most), so pick a multiple of the world\n"
            "    size; no --samples-per-shard or --shard-bytes beside it, and at most\n"
            "    as many shards as samples.\n"
            "The samples are shuffled once (--shuffle-seed, default 0) before they are\n"
            "dealt. Prints one line per shard, the totals, then the spec's lines:\n"
            "data.format: webdataset, data.uri (absolute: the brace pattern that names\n"
            "every shard) and model.numClasses (and, for an image folder, the class names).\n");
}

/* a whole number in [lo, hi], in full */
static int shards_whole(const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    *out = strtoll(v, &end, 10);
    return *v >= '0' && *v <= '9' && !*end && !errno && *out >= lo && *out <= hi ? 0 : -1;
}

/* `vitjob-worker shards`: webdataset shards (worker/data/shardwriter.h). */
static vj_err cmd_shards(int argc, char **argv, char *err, size_t errlen)
{
    shardwriter_options o = {.report = stdout};
    int seeded = 0;
    signal(SIGPIPE, SIG_IGN); /* lib/s3.h: a closed connection is an error, not a kill */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL, *want = NULL;
        long long n = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            shards_usage(stdout);
            return VJ_OK;
        } else if (strcmp(a, "--no-shuffle") == 0) {
            o.no_shuffle = 1;
            continue;
        } else if (strcmp(a, "--skip-bad") == 0) {
            o.skip_bad = 1;
            continue;
        } else if (!v || strncmp(a, "--", 2) != 0) {
            shards_usage(stderr);
            snprintf(err, errlen, "shards: unknown or incomplete argument '%s'", a);
            return VJ_ERR_USAGE;
        }
        i++;
        if (strcmp(a, "--from") == 0) {
            o.from = v;
        } else if (strcmp(a, "--out") == 0) {
            o.out = v;
        } else if (strcmp(a, "--endpoint") == 0) {
            o.endpoint = v;
        } else if (strcmp(a, "--samples-per-shard") == 0) {
            if (shards_whole(v, 1, LONG_MAX, &n)) want = "a whole number of at least 1";
            o.samples_per_shard = (long)n;
        } else if (strcmp(a, "--shard-bytes") == 0) {
            if (shardwriter_parse_size(v, &o.shard_bytes))
                want = "a size in bytes such as 1000000, 64M, 1G, 512Ki or 64Mi";
        } else if (strcmp(a, "--quality") == 0) {
            if (shards_whole(v, 1, 100, &n)) want = "a whole number from 1 to 100";
            o.quality = (int)n;
            o.idx_options_given = 1;
        } else if (strcmp(a, "--shuffle-seed") == 0) {
            if (shards_whole(v, 0, LLONG_MAX, &n)) want = "a whole number of at least 0";
            o.seed = (uint64_t)n;
            seeded = 1;
        } else if (strcmp(a, "--split") == 0) {
            if (strcmp(v, "train") != 0 && strcmp(v, "t10k") != 0) want = "train or t10k";
            o.split = v;
            o.idx_options_given = 1;
        } else if (strcmp(a, "--format") == 0) {
            if (strcmp(v, "jpeg") != 0 && strcmp(v, "png") != 0) want = "jpeg or png";
            o.format = strcmp(v, "png") == 0 ? ENCODE_PNG : ENCODE_JPEG;
            o.idx_options_given = 1;
        } else if (strcmp(a, "--log-level") == 0) {
            if (log_set_level_name(v) != 0) want = "debug, info, warn or error";
        } else {
            shards_usage(stderr);
            snprintf(err, errlen, "shards: unknown argument '%s'", a);
            return VJ_ERR_USAGE;
        }
        if (want) {
            snprintf(err, errlen, "shards: %s '%s': must be %s", a, v, want);
            return VJ_ERR_USAGE;
        }
    }
    if (seeded && o.no_shuffle) {
        snprintf(err, errlen, "shards: --shuffle-seed and --no-shuffle do not go together");
        return VJ_ERR_USAGE;
    }
    if (!o.from || !o.out) {
        shards_usage(stderr);
        snprintf(err, errlen, "shards: --from SRC and --out PATTERN are required");
        return VJ_ERR_USAGE;
    }
    return shardwriter_run(&o, NULL, err, errlen);
}

/* `schema FILE`: FILE with its generated regions written again from the
 * config table (api/config_schema.h), on stdout; `make schema` writes it
 * back. `schema` alone: each section's CRD properties. */
static vj_err cmd_schema(int argc, char **argv, char *err, size_t errlen)
{
    buf in = {.max = 16u << 20}, out = {0};
    vj_err e = VJ_OK;
    if (argc > 1) {
        snprintf(err, errlen, "usage: vitjob-worker schema [FILE]");
        e = VJ_ERR_USAGE;
    } else if (argc == 1) {
        if (file_read(&in, argv[0], err, errlen) != 0)
            e = VJ_ERR_CONFIG;
        else
            e = config_schema_rewrite(&out, in.data ? in.data : "", in.len, argv[0], err, errlen);
    } else {
        static const char *const sections[] = {"model", "data", "training", "training.optimizer",
                                               "training.ema", "checkpoint"};
        for (size_t i = 0; e == VJ_OK && i < sizeof sections / sizeof sections[0]; i++) {
            buf_printf(&out, "# spec.%s.properties\n", sections[i]);
            e = config_schema_crd_section(&out, sections[i], 0, err, errlen);
        }
    }
    if (e == VJ_OK && out.len && fwrite(out.data, 1, out.len, stdout) != out.len) {
        snprintf(err, errlen, "cannot write to stdout");
        e = VJ_ERR_IO;
    }
    buf_free(&in);
    buf_free(&out);
    return e;
}

static vj_err cmd_version(int argc, char **argv, char *err, size_t errlen)
{
    (void)argc, (void)argv, (void)err, (void)errlen;
    char gpu[4096 + 128];
    ops_cuda_describe(gpu, sizeof gpu);
    printf("vitjob-worker %s\ncommit: %s\nbackends: cpu (%s), gloo; %s\n",
           VJ_RELEASE, vj_git_commit(), ops_cpu_blas(), gpu);
    return VJ_OK;
}

static vj_err cmd_help(int argc, char **argv, char *err, size_t errlen)
{
    (void)argc, (void)argv, (void)err, (void)errlen;
    usage(stdout);
    return VJ_OK;
}

/* The subcommands: each row's first name is the command, the others spell
 * it too; `usage` is its part of the usage text (NULL: not listed), with
 * its continuation lines indented as printed. A row runs either `run` (its
 * error class and message go to exit_with) or `main` (which logs its own
 * last line and returns the exit code). */
typedef struct {
    const char *names[3];
    vj_err (*run)(int argc, char **argv, char *err, size_t errlen);
    int (*main)(int argc, char **argv);
    const char *usage;
} subcommand;

static const subcommand subcommands[] = {
    {{"train"}, cmd_train, NULL,
     "train [--config FILE] [--set key=value ...] [--metrics FILE]\n"
     "                           [--log-level debug|info|warn|error]"},
    {{"checkpoints"}, cmd_checkpoints, NULL, "checkpoints --uri URI|PATH [--endpoint URL]"},
    {{"export"}, cmd_export, NULL,
     "export --from URI|PATH[/step-N] --out FILE [--endpoint URL] [--raw]"},
    {{"shards"}, cmd_shards, NULL, "shards --from SRC --out PATTERN [...]   (shards --help)"},
    {{"plan"}, NULL, plan_cmd_main,
     "plan [--config FILE] [--set key=value ...] [--replicas N] [...]\n"
     "                          (what a rank needs and how fast: plan --help)"},
    {{"exit-codes"}, cmd_exit_codes, NULL, "exit-codes"},
    {{"schema"}, cmd_schema, NULL, "schema [FILE]"},
    {{"version", "--version"}, cmd_version, NULL, "version"},
    {{"help", "-h", "--help"}, cmd_help, NULL, NULL},
};
#define N_SUBCOMMANDS (sizeof subcommands / sizeof subcommands[0])

static void usage(FILE *to)
{
    const char *lead = "usage: ";
    for (size_t i = 0; i < N_SUBCOMMANDS; i++) {
        if (!subcommands[i].usage) continue;
        fprintf(to, "%svitjob-worker %s\n", lead, subcommands[i].usage);
        lead = "       ";
    }
    fputs("\n"
          "Trains a Vision Transformer as the config (JSON or YAML: the spec of a ViTJob,\n"
          "or a whole ViTJob manifest) says. Keys are those of docs/design.md, dotted:\n"
          "  --set training.steps=200 --set model.preset=fmnist_small\n"
          "Exit codes: 0 done, 2 bad config, 3 bad or missing data, 128+N stopped by\n"
          "signal N, other: retryable. `vitjob-worker exit-codes` lists every case.\n",
          to);
}

/* The row whose names include word, or NULL. */
static const subcommand *find_subcommand(const char *word)
{
    for (size_t i = 0; i < N_SUBCOMMANDS; i++)
        for (size_t k = 0; k < 3 && subcommands[i].names[k]; k++)
            if (strcmp(subcommands[i].names[k], word) == 0) return &subcommands[i];
    return NULL;
}

/* The exit code of a subcommand's error class (api/exitcode.h), and the
 * last line that says it: every subcommand ends here. A local agent's
 * verdict (train with several local ranks) is the pod's exit code. */
static int exit_with(vj_err e, const char *err)
{
    if (e == VJ_OK && agent_code >= 0) { /* the local agent's verdict */
        if (agent_code != 0)
            log_final("agent", "exit_code=%d class=%s retried=%s msg=%s", agent_code,
                      LOGV(agent_code >= 128 ? "stopped"
                           : vj_exit_permanent(agent_code) ? "local_rank" : "peer_lost"),
                      vj_exit_permanent(agent_code) ? "no" : "yes", LOGV(err));
        return agent_code;
    }
    int code = vj_exit_code(e, stop_requested);
    if (e != VJ_OK) {
        const vj_err_row *row = vj_err_info(e);
        log_final("worker", "exit_code=%d class=%s retried=%s msg=%s", code,
                  LOGV(row ? row->name : "unknown"), vj_exit_permanent(code) ? "no" : "yes",
                  LOGV(err));
    }
    return code;
}

int main(int argc, char **argv)
{
    /* 0, 1 and 2 open before any file is: see lib/stdfds.h */
    stdfds_ensure("vitjob-worker", vj_exit_code(VJ_ERR_IO, 0));
    if (argc < 2) {
        usage(stderr);
        return vj_exit_code(VJ_ERR_USAGE, 0);
    }
    main_argv = argv;
    termmsg_init(getenv(VJ_ENV_TERMINATION_LOG)); /* where the last line also goes */
    char err[1024] = "";
    const subcommand *c = find_subcommand(argv[1]);
    if (!c) {
        snprintf(err, sizeof err, "unknown command '%s'", argv[1]);
        int code = exit_with(VJ_ERR_USAGE, err);
        usage(stderr);
        return code;
    }
    if (c->main) return c->main(argc - 2, argv + 2);
    return exit_with(c->run(argc - 2, argv + 2, err, sizeof err), err);
}
