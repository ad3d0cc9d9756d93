/* lib/log.c - see log.h. Owns the line format; never logs secrets itself
 * (callers must not pass them). */
#include "log.h"

#include "timefmt.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int log_level_current = LOG_LEVEL_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

int log_set_level_name(const char *name)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            log_level_current = i;
            return 0;
        }
    }
    return -1;
}

void log_line(enum log_level level, const char *component, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    char when[TIMEFMT_LEN];
    timefmt_now(when, 3);
    /* One write per line so that lines from several processes do not interleave. */
    char line[1200];
    int n = snprintf(line, sizeof line, "ts=%s level=%s comp=%s %s\n", when, level_names[level],
                     component, msg);
    if (n > (int)sizeof line - 1) {
        n = (int)sizeof line - 1;
        line[n - 1] = '\n';
    }
    fwrite(line, 1, (size_t)n, stderr);
}
