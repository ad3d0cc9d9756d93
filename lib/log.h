/* lib/log.h - leveled, one-line-per-event logging to stderr, in logfmt.
 *
 * Owns: the log level, the line format (`ts=... level=... comp=... k=v ...`)
 * and the one quoting of values (log_value): a value is written bare when
 * it can be, else in double quotes with `"`, `\`, control characters and
 * bytes that are not UTF-8 escaped as go-logfmt, logfmt's reference
 * implementation, writes and reads them. Whatever a value holds (a path
 * with `" forged="1`, a newline, an escape sequence), it is one value of
 * one line that a logfmt parser reads back as it was.
 * log_final also hands the line to lib/termmsg.h (the termination message).
 * Must not: allocate, or format anything when the level is filtered out.
 *
 * Callers write the keys and literal values in the format string and pass
 * every string value through LOGV (or LOGVF, for text formatted around
 * one): never `key=%s` or `key=\"%s\"` on a bare string.
 *     LOG_INFO("train", "event=exported path=%s step=%ld", LOGV(path), step);
 *     LOG_ERROR("worker", "msg=%s", LOGVF("cannot open '%s'", name));
 */
#ifndef VITJOB_LOG_H
#define VITJOB_LOG_H

#include <stddef.h>

enum log_level { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

extern int log_level_current;

/* Parses "debug", "info", "warn", "error"; returns 0 on success, -1 otherwise. */
int log_set_level_name(const char *name);

/* in as one logfmt value into out (always NUL-terminated), go-logfmt's
 * encoding: bare when it needs no quotes; in double quotes when it is
 * empty or holds a space, `=`, `"`, a control character (C0, DEL, C1) or
 * a byte that is not UTF-8 (or U+FFFD), with `\"`, `\\`, `\n`, `\r`, `\t`,
 * `\u00XX` for the other control characters and `\ufffd` for each byte
 * that is not UTF-8. When out is too small the value is cut at a whole
 * character or escape and its closing quote kept. Returns out. */
const char *log_value(char *out, size_t outlen, const char *in);
/* log_value of the printf-formatted text (cut at LOG_VALUE_MAX bytes). */
const char *log_valuef(char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Control characters and bytes that are not UTF-8 in in, escaped as in a
 * quoted value (`\n`, `\u001b`, `\ufffd`; quotes and backslashes left as
 * they are) into out (always NUL-terminated; cut at a whole character or
 * escape). log_line's last guard over the whole formatted message, so that
 * a value a caller forgot to quote still cannot forge a line. Returns the
 * length written. */
size_t log_escape(char *out, size_t outlen, const char *in);

void log_line(enum log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A program's last line, the error it exits with: logged at level error as
 * log_line logs it (whatever the level), and the same line (without its
 * newline) written as the termination message (lib/termmsg.h), where
 * Kubernetes shows it. */
void log_final(const char *component, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The largest value LOGV and LOGVF write, quotes and escapes included. */
#define LOG_VALUE_MAX 1024
#ifndef __cplusplus
/* The quoted value of s (or of the formatted text), in a buffer that lives
 * until the end of the statement that holds the LOG_ call. */
#define LOGV(s) log_value((char[LOG_VALUE_MAX]){0}, LOG_VALUE_MAX, (s))
#define LOGVF(...) log_valuef((char[LOG_VALUE_MAX]){0}, LOG_VALUE_MAX, __VA_ARGS__)
#endif

#define LOG_AT(lvl, comp, ...) \
    do { if ((lvl) >= log_level_current) log_line((lvl), (comp), __VA_ARGS__); } while (0)
#define LOG_DEBUG(comp, ...) LOG_AT(LOG_LEVEL_DEBUG, comp, __VA_ARGS__)
#define LOG_INFO(comp, ...)  LOG_AT(LOG_LEVEL_INFO, comp, __VA_ARGS__)
#define LOG_WARN(comp, ...)  LOG_AT(LOG_LEVEL_WARN, comp, __VA_ARGS__)
#define LOG_ERROR(comp, ...) LOG_AT(LOG_LEVEL_ERROR, comp, __VA_ARGS__)

#endif
