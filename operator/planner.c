/* operator/planner.c - see planner.h. */
#define _GNU_SOURCE /* pipe2 */
#include "planner.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "json.h"

extern char **environ;

void vj_planner_quantity(char *buf, size_t len, double bytes)
{
    static const char *const unit[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi"};
    int u = 0;
    while (bytes >= 1024 && u < 5) bytes /= 1024, u++;
    if (u == 0 || bytes >= 1000 || fabs(bytes - round(bytes)) < 0.05)
        snprintf(buf, len, "%.0f%s", round(bytes), unit[u]);
    else
        snprintf(buf, len, "%.1f%s", bytes, unit[u]);
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* The largest non-zero parts of memoryPerRank, largest first. */
static void largest_parts(const cJSON *mem, char *out, size_t len)
{
    static const struct { const char *key, *words; } parts[] = {
        {"parameters", "parameters"},          {"gradients", "gradients"},
        {"optimizerState", "optimizer state"}, {"ema", "EMA"},
        {"lowPrecisionWeights", "16-bit weights"}, {"gatheredUnits", "gathered units"},
        {"activations", "activations"},        {"workspace", "workspace"},
        {"collectiveBuffers", "collective buffers"}, {"reserve", "CUDA context"},
    };
    enum { N = sizeof parts / sizeof parts[0] };
    double v[N];
    int used[N] = {0};
    for (int i = 0; i < N; i++) v[i] = num(mem, parts[i].key);
    size_t at = 0;
    out[0] = 0;
    for (int k = 0; k < 4; k++) {
        int best = -1;
        for (int i = 0; i < N; i++)
            if (!used[i] && v[i] > 0 && (best < 0 || v[i] > v[best])) best = i;
        if (best < 0) break;
        used[best] = 1;
        char q[32];
        vj_planner_quantity(q, sizeof q, v[best]);
        int w = snprintf(out + at, len - at, "%s%s %s", k ? ", " : "", parts[best].words, q);
        if (w < 0 || (size_t)w >= len - at) break;
        at += (size_t)w;
    }
}

/* "elastic": its smallest size (the first of "sizes"), or none. */
static void read_elastic(const cJSON *el, double device_bytes, vj_admission *out)
{
    int min = (int)num(el, "minReplicas");
    if (min < 1) return;
    out->elastic.min_replicas = min;
    out->elastic.smallest_fitting = (int)num(el, "smallestFittingReplicas");
    const cJSON *low = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(el, "sizes"), 0);
    if (!low || num(low, "totalBytes") <= 0) return;
    out->elastic.replicas = (int)num(low, "replicas");
    out->elastic.world = (int)num(low, "world");
    out->elastic.micro_batch = (int)num(low, "microBatchSize");
    out->elastic.accumulation = (int)num(low, "accumulation");
    out->elastic.memory_bytes = num(low, "totalBytes");
    out->elastic.fits =
        device_bytes <= 0 || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(low, "fits"));
}

int vj_planner_parse(const char *json, double device_bytes, vj_admission *out, char *err,
                     size_t errlen)
{
    cJSON *o = cJSON_Parse(json);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(o, "memoryPerRank");
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(o, "time");
    double total = num(mem, "total"), ips = num(tm, "imagesPerSecond");
    const cJSON *fits = cJSON_GetObjectItemCaseSensitive(o, "fits");
    if (!cJSON_IsObject(o) || total <= 0 || ips < 0 || !cJSON_IsBool(fits)) {
        snprintf(err, errlen, "the planner's output is not a plan (no memoryPerRank.total, "
                 "time.imagesPerSecond or fits)");
        cJSON_Delete(o);
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->memory_bytes = total;
    out->device_bytes = device_bytes;
    out->images_per_s = ips;
    out->fits = device_bytes <= 0 || cJSON_IsTrue(fits);
    out->micro_batch = (int)num(o, "microBatchSize");
    read_elastic(cJSON_GetObjectItemCaseSensitive(o, "elastic"), device_bytes, out);
    snprintf(out->device, sizeof out->device, "%s", json_str(o, "device") ? json_str(o, "device") : "");
    snprintf(out->sharding, sizeof out->sharding, "%s",
             json_str(o, "sharding") ? json_str(o, "sharding") : "");
    largest_parts(mem, out->parts, sizeof out->parts);
    /* the changes are cumulative: the suggestion is every change up to it */
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(o, "changes");
    int sug = (int)num(o, "suggestion");
    if (!out->fits && sug >= 0 && sug < cJSON_GetArraySize(ch)) {
        size_t at = 0;
        for (int i = 0; i <= sug; i++) {
            const char *what = json_str(cJSON_GetArrayItem(ch, i), "change");
            int w = snprintf(out->suggestion + at, sizeof out->suggestion - at, "%sspec.%s",
                             i ? " and " : "", what ? what : "?");
            if (w < 0 || (size_t)w >= sizeof out->suggestion - at) break;
            at += (size_t)w;
        }
        char q[32];
        vj_planner_quantity(q, sizeof q, num(cJSON_GetArrayItem(ch, sug), "totalBytes"));
        if (at < sizeof out->suggestion)
            snprintf(out->suggestion + at, sizeof out->suggestion - at, " (%s per rank)", q);
    }
    cJSON_Delete(o);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Appends what fd has to *buf (grown); 0 at EOF, 1 more to come, -1 error. */
static int drain(int fd, char **buf, size_t *len, size_t *cap)
{
    if (*len + 4097 > *cap) {
        size_t n = *cap ? *cap * 2 : 8192;
        char *b = realloc(*buf, n);
        if (!b) return -1;
        *buf = b, *cap = n;
    }
    ssize_t r = read(fd, *buf + *len, *cap - *len - 1);
    if (r < 0) return errno == EINTR || errno == EAGAIN ? 1 : -1;
    *len += (size_t)r;
    (*buf)[*len] = 0;
    return r > 0;
}

/* The last line of the planner's log that says msg=..., for the error. */
static void last_line(const char *log, char *out, size_t len)
{
    const char *end = log + strlen(log);
    while (end > log && (end[-1] == '\n' || end[-1] == ' ')) end--;
    const char *start = end;
    while (start > log && start[-1] != '\n') start--;
    snprintf(out, len, "%.*s", (int)(end - start), start);
}

int vj_planner_run(const vj_planner_args *a, const cJSON *worker_config, vj_admission *out,
                   char *err, size_t errlen)
{
    char replicas[16], local[16], mem[32], min[16];
    snprintf(min, sizeof min, "%d", a->min_replicas);
    snprintf(replicas, sizeof replicas, "%d", a->replicas);
    snprintf(local, sizeof local, "%d", a->local_ranks);
    snprintf(mem, sizeof mem, "%.0f", a->gpu_bytes);
    const char *argv[24];
    int n = 0;
    argv[n++] = a->program, argv[n++] = "plan", argv[n++] = "--config", argv[n++] = "-";
    argv[n++] = "--replicas", argv[n++] = replicas, argv[n++] = "--local-ranks", argv[n++] = local;
    if (a->min_replicas > 0) argv[n++] = "--min-replicas", argv[n++] = min;
    argv[n++] = "--device", argv[n++] = "cuda";
    if (a->gpu_kind) argv[n++] = "--gpu", argv[n++] = a->gpu_kind;
    if (a->gpu_bytes > 0) argv[n++] = "--gpu-memory", argv[n++] = mem;
    argv[n++] = "--json", argv[n] = NULL;

    char *cfg = cJSON_PrintUnformatted(worker_config);
    if (!cfg) {
        snprintf(err, errlen, "out of memory writing the job's config for the planner");
        return -1;
    }
    int in[2] = {-1, -1}, so[2] = {-1, -1}, se[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    int fa_ok = 0, rc = -1;
    pid_t pid = -1;
    char *obuf = NULL, *ebuf = NULL;
    size_t olen = 0, ocap = 0, elen = 0, ecap = 0;
    if (pipe2(in, O_CLOEXEC) || pipe2(so, O_CLOEXEC) || pipe2(se, O_CLOEXEC) ||
        posix_spawn_file_actions_init(&fa)) {
        snprintf(err, errlen, "planner %s: cannot make its pipes: %s", a->program, strerror(errno));
        goto out;
    }
    fa_ok = 1;
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, so[1], 1);
    posix_spawn_file_actions_adddup2(&fa, se[1], 2);
    int e = posix_spawn(&pid, a->program, &fa, NULL, (char *const *)argv, environ);
    if (e != 0) {
        pid = -1;
        snprintf(err, errlen, "planner %s: cannot run it: %s", a->program, strerror(e));
        goto out;
    }
    close(in[0]), close(so[1]), close(se[1]);
    in[0] = so[1] = se[1] = -1;
    /* the config is small (the worker's keys): the pipe takes it whole; a
     * planner that died early gives EPIPE (SIGPIPE is ignored by main) */
    size_t clen = strlen(cfg), off = 0;
    while (off < clen) {
        ssize_t w = write(in[1], cfg + off, clen - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    close(in[1]);
    in[1] = -1;
    double deadline = now_s() + (a->timeout_s > 0 ? a->timeout_s : VJ_PLANNER_TIMEOUT_S);
    int open_o = 1, open_e = 1, timed_out = 0;
    while (open_o || open_e) {
        double left = deadline - now_s();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd p[2] = {{.fd = open_o ? so[0] : -1, .events = POLLIN},
                              {.fd = open_e ? se[0] : -1, .events = POLLIN}};
        int r = poll(p, 2, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR) break;
        if (r <= 0) continue;
        if (open_o && p[0].revents) open_o = drain(so[0], &obuf, &olen, &ocap) > 0;
        if (open_e && p[1].revents) open_e = drain(se[0], &ebuf, &elen, &ecap) > 0;
    }
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    pid = -1;
    char why[256] = "";
    last_line(ebuf ? ebuf : "", why, sizeof why);
    if (timed_out) {
        snprintf(err, errlen, "planner %s: no plan within %d s (killed)", a->program,
                 a->timeout_s > 0 ? a->timeout_s : VJ_PLANNER_TIMEOUT_S);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "planner %s: exit status %d: %s", a->program,
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                 why[0] ? why : "(no message)");
    } else if (vj_planner_parse(obuf ? obuf : "", a->gpu_bytes, out, err, errlen) == 0) {
        out->replicas = a->replicas;
        if (a->gpu_bytes > 0)
            snprintf(out->device_source, sizeof out->device_source, "%s",
                     a->gpu_source ? a->gpu_source : "given");
        rc = 0;
    }
out:
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    }
    if (fa_ok) posix_spawn_file_actions_destroy(&fa);
    int fds[] = {in[0], in[1], so[0], so[1], se[0], se[1]};
    for (int i = 0; i < 6; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(cfg);
    free(obuf);
    free(ebuf);
    return rc;
}
