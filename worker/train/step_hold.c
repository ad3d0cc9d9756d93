/* worker/train/step_hold.c - tests only: the steps the loop waits before
 * while a file exists (step_hold.h says what it owns and must not do). */
#include "step_hold.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

typedef struct {
    long step;
    char *path;
} hold;

struct step_hold {
    hold *holds;
    size_t n;
};

void step_hold_free(step_hold *h)
{
    if (!h) return;
    for (size_t i = 0; i < h->n; i++) free(h->holds[i].path);
    free(h->holds);
    free(h);
}

vj_err step_hold_parse(step_hold **out, const char *spec, char *err, size_t errlen)
{
    *out = NULL;
    if (!spec || !*spec) return VJ_OK;
    step_hold *h = calloc(1, sizeof *h);
    size_t cap = 1;
    for (const char *c = spec; *c; c++) cap += *c == ',';
    if (!h || !(h->holds = calloc(cap, sizeof *h->holds))) {
        step_hold_free(h);
        snprintf(err, errlen, "%s: out of memory", STEP_HOLD_ENV);
        return VJ_ERR_OUT_OF_MEMORY;
    }
    const char *c = spec;
    for (;;) {
        size_t len = strcspn(c, ",");
        char *end;
        errno = 0;
        long step = strtol(c, &end, 10);
        const char *path = end + 1;
        size_t plen = (size_t)(c + len - path);
        if (end == c || errno || step < 1 || *end != ':' || end >= c + len || plen == 0 ||
            path[0] != '/') {
            snprintf(err, errlen, "%s: entry \"%.*s\" is not STEP:PATH (a step >= 1, an absolute "
                     "path); the variable is for tests only", STEP_HOLD_ENV, (int)len, c);
            step_hold_free(h);
            return VJ_ERR_ENVIRONMENT;
        }
        hold *d = &h->holds[h->n];
        if (!(d->path = strndup(path, plen))) {
            step_hold_free(h);
            snprintf(err, errlen, "%s: out of memory", STEP_HOLD_ENV);
            return VJ_ERR_OUT_OF_MEMORY;
        }
        d->step = step;
        h->n++;
        if (!c[len]) break;
        c += len + 1;
    }
    *out = h;
    return VJ_OK;
}

/* The path of a hold of step whose file exists, or NULL. */
static const char *held_by(const step_hold *h, long step)
{
    for (size_t i = 0; h && i < h->n; i++)
        if (h->holds[i].step == step && access(h->holds[i].path, F_OK) == 0) return h->holds[i].path;
    return NULL;
}

int step_hold_due(const step_hold *h, long step) { return held_by(h, step) != NULL; }

void step_hold_wait(const step_hold *h, long step, int rank, volatile sig_atomic_t *stop,
                    void (*tick)(void *ctx), void *ctx)
{
    const char *path = held_by(h, step);
    if (!path) return;
    LOG_INFO("train", "event=test_hold rank=%d step=%ld path=%s", rank, step, LOGV(path));
    double t0 = mono_seconds();
    while ((path = held_by(h, step)) != NULL && !(stop && *stop)) {
        if (tick) tick(ctx);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    LOG_INFO("train", "event=test_released rank=%d step=%ld waited_s=%.2f why=%s", rank, step,
             mono_seconds() - t0, path ? "stop" : "file_removed");
}
