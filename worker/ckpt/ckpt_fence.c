/* worker/ckpt/ckpt_fence.c - see ckpt_fence.h. */
#include "ckpt_fence.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

void ckpt_manifest_name(long gen, char *out, size_t len)
{
    if (gen > 0)
        snprintf(out, len, "manifest.g%ld.json", gen);
    else
        snprintf(out, len, "manifest.json");
}

void ckpt_shard_name(int rank, int world, long gen, char *out, size_t len)
{
    if (gen > 0)
        snprintf(out, len, "shard-%05d-of-%05d.g%ld.bin", rank, world, gen);
    else
        snprintf(out, len, "shard-%05d-of-%05d.bin", rank, world);
}

/* rest is "<ext>" (generation 0) or ".g<N><ext>" with N >= 1: *gen, 0; else -1. */
static int gen_suffix(const char *rest, const char *ext, long *gen)
{
    if (strcmp(rest, ext) == 0) {
        *gen = 0;
        return 0;
    }
    if (strncmp(rest, ".g", 2) != 0 || rest[2] < '1' || rest[2] > '9') return -1;
    char *end;
    long g = strtol(rest + 2, &end, 10);
    if (g < 1 || strcmp(end, ext) != 0) return -1;
    *gen = g;
    return 0;
}

ckpt_obj_kind ckpt_object_kind(const char *base, long *gen)
{
    long g = 0;
    *gen = 0;
    if (strncmp(base, "manifest", 8) == 0 && gen_suffix(base + 8, ".json", &g) == 0) {
        *gen = g;
        return CKPT_OBJ_MANIFEST;
    }
    int r, w, off = 0;
    char canon[96];
    if (sscanf(base, "shard-%5d-of-%5d%n", &r, &w, &off) == 2 && off > 0 &&
        gen_suffix(base + off, ".bin", &g) == 0) {
        ckpt_shard_name(r, w, g, canon, sizeof canon); /* the writer's spelling only */
        if (strcmp(canon, base) == 0) {
            *gen = g;
            return CKPT_OBJ_SHARD;
        }
    }
    return CKPT_OBJ_OTHER;
}

ckpt_status ckpt_fence_newest(ckpt_store *s, long *newest, char *err, size_t errlen)
{
    char **names = NULL;
    uint64_t *sizes = NULL;
    size_t n = 0;
    *newest = -1;
    ckpt_status st = ckpt_store_list_dir(s, CKPT_FENCE_DIR, &names, &sizes, &n, err, errlen);
    if (st) return st;
    const char *pre = CKPT_FENCE_DIR "/g";
    for (size_t i = 0; i < n; i++) {
        /* "fence/g<N>.json", N >= 1; anything else in the folder is not a fence */
        const char *p = names[i] + strlen(pre);
        char *end;
        if (strncmp(names[i], pre, strlen(pre)) == 0 && *p >= '1' && *p <= '9') {
            long g = strtol(p, &end, 10);
            if (strcmp(end, ".json") == 0 && g > *newest) *newest = g;
        }
        free(names[i]);
    }
    free(names);
    free(sizes);
    return CKPT_OK;
}

/* The message and the log line of a refusal; in_flight: the operation
 * was already under way when the fence appeared (asked again after it). */
static ckpt_status fenced(long gen, long newer, const char *action, long step, int in_flight,
                          char *err, size_t errlen)
{
    LOG_WARN("ckpt", "event=fenced generation=%ld newer_generation=%ld action=%s step=%ld "
             "in_flight=%d msg=%s", gen, newer, LOGV(action), step, in_flight,
             LOGVF("generation %ld has taken the checkpoints over; this writer stores and "
                   "deletes nothing more", newer));
    snprintf(err, errlen, "checkpoint: this process is of an older generation (%ld) than the "
             "one that has taken the checkpoints over (%ld, %s/g%ld.json); %s %s of step %ld "
             "%s, and it stores and deletes nothing more", gen, newer, CKPT_FENCE_DIR, newer,
             in_flight ? "it took over while its" : "its", action, step,
             in_flight ? "was in flight" : "was refused");
    return CKPT_FENCED;
}

static ckpt_status check(ckpt_store *s, long gen, const char *action, long step, int in_flight,
                         char *err, size_t errlen)
{
    long newest;
    ckpt_status st = ckpt_fence_newest(s, &newest, err, errlen);
    if (st) return st;
    return newest > gen ? fenced(gen, newest, action, step, in_flight, err, errlen) : CKPT_OK;
}

ckpt_status ckpt_fence_check(ckpt_store *s, long gen, const char *action, long step, char *err,
                             size_t errlen)
{
    return check(s, gen, action, step, 0, err, errlen);
}

ckpt_status ckpt_fence_recheck(ckpt_store *s, long gen, const char *action, long step,
                               char *err, size_t errlen)
{
    return check(s, gen, action, step, 1, err, errlen);
}

/* ---------------------------------------------------------------- test hold */

static void (*hold_fn)(const char *action, long step, void *ctx);
static void *hold_ctx;

void ckpt_fence_set_hold(void (*fn)(const char *action, long step, void *ctx), void *ctx)
{
    hold_fn = fn;
    hold_ctx = ctx;
}

void ckpt_fence_hold(const char *action, long step)
{
    if (hold_fn) {
        hold_fn(action, step, hold_ctx);
        return;
    }
    const char *spec = getenv(CKPT_FENCE_HOLD_ENV);
    if (!spec || !*spec) return;
    /* "ACTION:STEP:FIFO": this action at this step waits for a line on FIFO */
    char want[32];
    long at;
    int off = 0;
    if (sscanf(spec, "%31[^:]:%ld:%n", want, &at, &off) != 2 || off == 0 ||
        strcmp(want, action) != 0 || at != step)
        return;
    LOG_INFO("ckpt", "event=fence_hold action=%s step=%ld fifo=%s", LOGV(action), step,
             LOGV(spec + off));
    FILE *f = fopen(spec + off, "r"); /* blocks until the test opens it to write */
    if (f) {
        char line[64];
        if (!fgets(line, sizeof line, f)) line[0] = '\0';
        fclose(f);
    }
    LOG_INFO("ckpt", "event=fence_released action=%s step=%ld", LOGV(action), step);
}

ckpt_status ckpt_fence_enter(ckpt_store *s, long restart, long *gen, char *err, size_t errlen)
{
    long newest;
    ckpt_status st = ckpt_fence_newest(s, &newest, err, errlen);
    if (st) return st;
    long g = newest >= restart ? newest + 1 : restart;
    if (g != restart)
        LOG_INFO("ckpt", "event=fence_rebased restart=%ld generation=%ld newest_fence=%ld "
                 "msg=%s", restart, g, newest,
                 LOGVF("this checkpoint.uri holds fences up to generation %ld (an earlier job "
                       "or run): this one writes as generation %ld", newest, g));
    *gen = g;
    if (g == 0) return CKPT_OK; /* no fence, generation 0: nobody older to exclude */
    char name[64], host[256] = "", body[512];
    snprintf(name, sizeof name, "%s/g%ld.json", CKPT_FENCE_DIR, g);
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    for (char *c = host; *c; c++) /* a host name's characters only: the body stays JSON */
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '-'))
            *c = '_';
    int n = snprintf(body, sizeof body, "{\"generation\": %ld, \"restart\": %ld, \"host\": "
                     "\"%s\", \"pid\": %ld, \"time\": %lld}\n", g, restart, host,
                     (long)getpid(), (long long)time(NULL));
    if ((st = ckpt_store_put(s, name, body, (size_t)n, err, errlen)) != CKPT_OK) return st;
    LOG_INFO("ckpt", "event=fence_entered generation=%ld name=%s", g, LOGV(name));
    /* a newer generation may have entered meanwhile (no conditional writes) */
    return ckpt_fence_check(s, g, "start", -1, err, errlen);
}
