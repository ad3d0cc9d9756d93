/* worker/main.c - the vitjob-worker command line.
 *
 * Owns: argument parsing, the environment contract of docs/design.md
 * (VITJOB_REPLICAS, VITJOB_LOCAL_RANKS, ...), signal handling (handlers
 * only set a flag) and the process exit code.
 * Must not: train, pick a backend (worker/train.c) or parse config files
 * itself (api/config.c).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "train.h"

#define VITJOB_VERSION "0.1.0"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void usage(FILE *to)
{
    fprintf(to,
            "usage: vitjob-worker train --config FILE [--set key=value ...] [--metrics FILE]\n"
            "                           [--log-level debug|info|warn|error]\n"
            "       vitjob-worker version\n"
            "\n"
            "Trains a Vision Transformer as the config (JSON or YAML: the spec of a ViTJob,\n"
            "or a whole ViTJob manifest) says. Keys are those of docs/design.md, dotted:\n"
            "  --set training.steps=200 --set model.preset=fmnist_small\n"
            "Exit codes: 0 done, 2 bad config, 3 bad or missing data, other: retryable.\n");
}

/* World size from the operator's env contract; 1 when run by hand. */
static int env_world_size(int *world, char *err, size_t errlen)
{
    const char *names[2] = {VJ_ENV_REPLICAS, VJ_ENV_LOCAL_RANKS};
    long v[2] = {1, 1};
    for (int i = 0; i < 2; i++) {
        const char *s = getenv(names[i]);
        if (!s || !*s) continue;
        char *end;
        v[i] = strtol(s, &end, 10);
        if (*end || v[i] < 1 || v[i] > 65536) {
            snprintf(err, errlen, "environment: %s=\"%s\" is not a count in [1, 65536]",
                     names[i], s);
            return VITJOB_EXIT_CONFIG;
        }
    }
    *world = (int)(v[0] * v[1]);
    return 0;
}

static int cmd_train(int argc, char **argv)
{
    char err[1024] = "";
    const char *config_path = NULL, *metrics = NULL;
    int rc;
    static vit_job_config cfg;
    config_defaults(&cfg);

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
                LOG_ERROR("worker", "msg=\"--log-level: unknown level '%s'\"", argv[i]);
                return VITJOB_EXIT_CONFIG;
            }
        } else if (strcmp(a, "--set") == 0 && has_value) {
            i++; /* applied after the file */
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            LOG_ERROR("worker", "msg=\"train: unknown or incomplete argument '%s'\"", a);
            usage(stderr);
            return VITJOB_EXIT_CONFIG;
        }
    }
    if (config_path && (rc = config_load_file(&cfg, config_path, err, sizeof err)) != 0) goto fail;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            if ((rc = config_set(&cfg, argv[++i], err, sizeof err)) != 0) goto fail;
        } else if (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--metrics") == 0 ||
                   strcmp(argv[i], "--log-level") == 0) {
            i++;
        }
    }
    if ((rc = env_world_size(&cfg.world_size, err, sizeof err)) != 0) goto fail;
    if ((rc = config_validate(&cfg, err, sizeof err)) != 0) goto fail;

    /* What this build can run. */
    if (cfg.world_size > 1) {
        snprintf(err, sizeof err, "world size %d: multi-process training is not in this build yet; "
                 "run with " VJ_ENV_REPLICAS "=1", cfg.world_size);
        rc = VITJOB_EXIT_CONFIG;
        goto fail;
    }
    if (cfg.checkpoint.uri[0])
        LOG_WARN("worker", "msg=\"checkpoint.uri is set but checkpoints are not in this build "
                 "yet; none will be written\" uri=%s", cfg.checkpoint.uri);

    char *json = config_to_json(&cfg);
    if (json) {
        LOG_INFO("worker", "event=config version=%s config=%s", VITJOB_VERSION, json);
        free(json);
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    train_options opt = {.metrics_path = metrics, .stop_flag = &stop_requested};
    rc = train_run(&cfg, &opt, err, sizeof err);
    if (rc) goto fail;
    return 0;
fail:
    LOG_ERROR("worker", "exit_code=%d msg=\"%s\"", rc, err);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return VITJOB_EXIT_CONFIG;
    }
    if (strcmp(argv[1], "train") == 0) return cmd_train(argc - 2, argv + 2);
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("vitjob-worker %s\n", VITJOB_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    LOG_ERROR("worker", "msg=\"unknown command '%s'\"", argv[1]);
    usage(stderr);
    return VITJOB_EXIT_CONFIG;
}
