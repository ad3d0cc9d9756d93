/* lib/log.c - see log.h. Owns the line format and the one quoting of values
 * (log_value, go-logfmt's encoding): whatever a value holds (a path, a
 * tensor name read from a file, a server's message), it stays one value of
 * one line of printable text that a logfmt parser reads back as it was.
 * Never logs secrets itself (callers must not pass them). */
#include "log.h"

#include "termmsg.h"
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

/* Length of the valid UTF-8 sequence of a code point >= U+0080 at p (at
 * most n bytes), its code point in *cp; 0 for a byte that starts none
 * (overlong forms, surrogates, past U+10FFFF, cut sequences). */
static size_t utf8_seq(const unsigned char *p, size_t n, unsigned *cp)
{
    unsigned c = p[0], v;
    size_t len;
    if (c >= 0xc2 && c <= 0xdf) len = 2, v = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, v = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, v = c & 0x07;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10ffff)) ||
        (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

/* The character at p (n bytes left): sets *take to its length in bytes and
 * returns the length of the escape it is written as in a quoted value
 * (written into esc), or 0 when it is written as itself. With quote, `"`
 * and `\` are escaped too. C0, DEL and C1 controls are escaped (go-logfmt
 * escapes only C0; DEL and C1 are escaped as well so that no value reaches
 * a terminal as a control: logfmt readers decode \u007f and \u0080..\u009f
 * back), and each byte that is not UTF-8 becomes \ufffd. */
static size_t escape_of(const unsigned char *p, size_t n, int quote, char esc[6], size_t *take)
{
    static const char hex[] = "0123456789abcdef";
    unsigned c = p[0], cp = c;
    *take = 1;
    if ((quote && (c == '"' || c == '\\')) || c == '\n' || c == '\r' || c == '\t') {
        esc[0] = '\\';
        esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : (char)c;
        return 2;
    }
    if (c >= 0x80) {
        size_t len = utf8_seq(p, n, &cp);
        if (len == 0) {
            memcpy(esc, "\\ufffd", 6);
            return 6;
        }
        *take = len;
        if (cp > 0x9f) return 0;
    } else if (c >= 0x20 && c != 0x7f) {
        return 0;
    }
    memcpy(esc, "\\u00", 4);
    esc[4] = hex[cp >> 4];
    esc[5] = hex[cp & 15];
    return 6;
}

/* Whether in must be quoted to be one logfmt value that reads back as it
 * is: empty, or holding a space, `=`, `"`, a control character, a byte
 * that is not UTF-8, or U+FFFD (go-logfmt's needsQuotedValueRune). */
static int needs_quotes(const char *in)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t n = strlen(in);
    if (n == 0) return 1;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i], cp;
        if (c <= ' ' || c == '=' || c == '"' || c == 0x7f) return 1;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len = utf8_seq(p + i, n - i, &cp);
        if (len == 0 || cp <= 0x9f || cp == 0xfffd) return 1;
        i += len;
    }
    return 0;
}

/* in escaped into out[o..] (quote: as inside quotes), leaving reserve bytes
 * of out free after it (the NUL, and a closing quote); cut at a whole
 * character or escape. Returns the new o; *consumed (if not NULL): the
 * bytes of in written. */
static size_t escape_into(char *out, size_t outlen, size_t o, size_t reserve, const char *in,
                          int quote, size_t *consumed)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t n = strlen(in), i = 0;
    while (i < n) {
        char esc[6];
        size_t take, elen = escape_of(p + i, n - i, quote, esc, &take);
        size_t len = elen ? elen : take;
        if (o + len + reserve > outlen) break; /* never half an escape or a character */
        memcpy(out + o, elen ? esc : in + i, len);
        o += len;
        i += take;
    }
    if (consumed) *consumed = i;
    return o;
}

size_t log_escape(char *out, size_t outlen, const char *in)
{
    if (outlen == 0) return 0;
    size_t o = escape_into(out, outlen, 0, 1, in, 0, NULL);
    out[o] = '\0';
    return o;
}

const char *log_value(char *out, size_t outlen, const char *in)
{
    if (outlen == 0) return "";
    if (!needs_quotes(in)) {
        /* printable ASCII and UTF-8 only: escape_into copies it as it is */
        out[escape_into(out, outlen, 0, 1, in, 0, NULL)] = '\0';
        return out;
    }
    if (outlen < 3) {
        out[0] = '\0';
        return out;
    }
    out[0] = '"';
    size_t o = escape_into(out, outlen, 1, 2, in, 1, NULL);
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

const char *log_valuef(char *out, size_t outlen, const char *fmt, ...)
{
    char text[LOG_VALUE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return log_value(out, outlen, text);
}

/* The end of the last whole key=value pair of msg (len bytes, cut
 * somewhere): the last space outside quotes, or 0. */
static size_t last_pair_end(const char *msg, size_t len)
{
    size_t end = 0;
    int quoted = 0;
    for (size_t i = 0; i < len; i++) {
        if (quoted) {
            if (msg[i] == '\\') i++;
            else if (msg[i] == '"') quoted = 0;
        } else if (msg[i] == '"') {
            quoted = 1;
        } else if (msg[i] == ' ') {
            end = i;
        }
    }
    return end;
}

/* The whole line of an event (newline included) into line; its length. */
static size_t format_line(char *line, size_t cap, enum log_level level, const char *component,
                          const char *fmt, va_list ap)
{
    char raw[4096], msg[4096];
    int rn = vsnprintf(raw, sizeof raw, fmt, ap);
    /* Values come quoted by log_value and format strings hold no control
     * characters, so this changes nothing on a well-made line; it is the
     * last guard for a value a caller forgot to quote: a newline in it
     * cannot forge a line, an escape sequence cannot reach a terminal. */
    size_t used;
    size_t len = escape_into(msg, sizeof msg, 0, 1, raw, 0, &used);
    msg[len] = '\0';
    /* A message too long is cut after its last whole pair (never inside
     * quotes, which would leave a value open) and says so. */
    int truncated = rn < 0 || (size_t)rn >= sizeof raw || used < strlen(raw);
    if (truncated) msg[last_pair_end(msg, len)] = '\0';

    char when[TIMEFMT_LEN];
    timefmt_now(when, 3);
    int n = snprintf(line, cap, "ts=%s level=%s comp=%s %s%s\n", when, level_names[level],
                     component, msg, truncated ? " truncated=true" : "");
    if (n > (int)cap - 1) {
        n = (int)cap - 1;
        line[n - 1] = '\n';
    }
    return (size_t)n;
}

#define LINE_CAP (4096 + 128)

void log_line(enum log_level level, const char *component, const char *fmt, ...)
{
    char line[LINE_CAP];
    va_list ap;
    va_start(ap, fmt);
    size_t n = format_line(line, sizeof line, level, component, fmt, ap);
    va_end(ap);
    /* One write per line so that lines from several processes do not interleave. */
    fwrite(line, 1, n, stderr);
}

void log_final(const char *component, const char *fmt, ...)
{
    char line[LINE_CAP];
    va_list ap;
    va_start(ap, fmt);
    size_t n = format_line(line, sizeof line, LOG_LEVEL_ERROR, component, fmt, ap);
    va_end(ap);
    fwrite(line, 1, n, stderr);
    termmsg_write(line, n - 1); /* without its newline */
}
