/* lib/log.c - see log.h. Owns the line format and its escaping: whatever a
 * value holds (a path, a tensor name read from a file), a log line is one
 * line of printable text. Never logs secrets itself (callers must not pass
 * them). */
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

/* Length of the valid UTF-8 sequence at p (at most n bytes) that encodes
 * a printable code point (not a C1 control, U+0080..U+009F), or 0. */
static size_t utf8_printable(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned cp;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp <= 0x9f))
        return 0; /* overlong, out of range, a surrogate, or a C1 control */
    return len;
}

size_t log_escape(char *out, size_t outlen, const char *in)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)in;
    size_t n = strlen(in), o = 0;
    if (outlen == 0) return 0;
    for (size_t i = 0; i < n;) {
        char esc[5];
        size_t elen = 0, take = 1;
        unsigned c = p[i];
        if (c == '\n') elen = 2, esc[0] = '\\', esc[1] = 'n';
        else if (c == '\r') elen = 2, esc[0] = '\\', esc[1] = 'r';
        else if (c == '\t') elen = 2, esc[0] = '\\', esc[1] = 't';
        else if (c < 0x20 || c == 0x7f) elen = 4;
        else if (c >= 0x80 && (take = utf8_printable(p + i, n - i)) == 0) take = 1, elen = 4;
        if (elen == 4) {
            esc[0] = '\\', esc[1] = 'x', esc[2] = hex[c >> 4], esc[3] = hex[c & 15];
        }
        const char *src = elen ? esc : (const char *)p + i;
        size_t len = elen ? elen : take;
        if (o + len >= outlen) break; /* never half an escape or a character */
        memcpy(out + o, src, len);
        o += len;
        i += take;
    }
    out[o] = '\0';
    return o;
}

void log_line(enum log_level level, const char *component, const char *fmt, ...)
{
    char raw[1024], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* Format strings hold no control characters, so what escaping changes
     * came from the values: a newline in a path cannot forge a line, an
     * escape sequence in a tensor name cannot reach a terminal. */
    log_escape(msg, sizeof msg, raw);

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
