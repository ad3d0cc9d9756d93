/* lib/log.h - leveled, one-line-per-event logging to stderr.
 *
 * Owns: the log level, the line format (`ts=... level=... comp=... msg="..." k=v`)
 * and escaping: control characters (C0, DEL, C1) and bytes that are not
 * UTF-8 in the formatted message become \n, \r, \t or \xNN, so every
 * event is one line of printable text whatever its values hold.
 * Must not: allocate, or format anything when the level is filtered out.
 * Callers pass key=value pairs in the format string themselves:
 *     LOG_INFO("train", "step=%d loss=%.4f", step, loss);
 */
#ifndef VITJOB_LOG_H
#define VITJOB_LOG_H

#include <stddef.h>

enum log_level { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

extern int log_level_current;

/* Parses "debug", "info", "warn", "error"; returns 0 on success, -1 otherwise. */
int log_set_level_name(const char *name);
/* Writes in, escaped as above, into out (always NUL-terminated; cut at a
 * character boundary when full). Returns the length written. */
size_t log_escape(char *out, size_t outlen, const char *in);
void log_line(enum log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define LOG_AT(lvl, comp, ...) \
    do { if ((lvl) >= log_level_current) log_line((lvl), (comp), __VA_ARGS__); } while (0)
#define LOG_DEBUG(comp, ...) LOG_AT(LOG_LEVEL_DEBUG, comp, __VA_ARGS__)
#define LOG_INFO(comp, ...)  LOG_AT(LOG_LEVEL_INFO, comp, __VA_ARGS__)
#define LOG_WARN(comp, ...)  LOG_AT(LOG_LEVEL_WARN, comp, __VA_ARGS__)
#define LOG_ERROR(comp, ...) LOG_AT(LOG_LEVEL_ERROR, comp, __VA_ARGS__)

#endif
