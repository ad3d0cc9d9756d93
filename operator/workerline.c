/* operator/workerline.c - see workerline.h. Reads back one logfmt value as
 * lib/log.c writes it (go-logfmt's escapes); nothing else of logfmt. */
#include "workerline.h"

#include <string.h>

/* out gets c; control characters become a space; 0 when out is full. */
static int put(char *out, size_t outlen, size_t *o, unsigned char c)
{
    if (*o + 1 >= outlen)
        return 0;
    out[(*o)++] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
    return 1;
}

/* The code point cp as UTF-8 into out (control characters: a space). */
static int put_cp(char *out, size_t outlen, size_t *o, unsigned cp)
{
    unsigned char b[3];
    size_t n;
    if (cp < 0x80) {
        return put(out, outlen, o, (unsigned char)cp);
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | cp >> 6), b[1] = (unsigned char)(0x80 | (cp & 0x3F)), n = 2;
    } else {
        b[0] = (unsigned char)(0xE0 | cp >> 12), b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F)), n = 3;
    }
    if (*o + n >= outlen)
        return 0;
    memcpy(out + *o, b, n);
    *o += n;
    return 1;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The value at v (up to end) read back: bare up to a space, or quoted with
 * \" \\ \n \r \t \uXXXX. */
static size_t read_value(const char *v, const char *end, char *out, size_t outlen)
{
    size_t o = 0;
    if (v < end && *v != '"') {
        while (v < end && *v != ' ' && put(out, outlen, &o, (unsigned char)*v))
            v++;
        return o;
    }
    for (v++; v < end && *v != '"'; v++) {
        int ok;
        if (*v != '\\' || v + 1 >= end) {
            ok = put(out, outlen, &o, (unsigned char)*v);
        } else if (v[1] == 'u' && v + 5 < end) {
            int h[4] = {hexval(v[2]), hexval(v[3]), hexval(v[4]), hexval(v[5])};
            if ((h[0] | h[1] | h[2] | h[3]) < 0) {
                ok = put(out, outlen, &o, (unsigned char)*v);
            } else {
                ok = put_cp(out, outlen, &o, (unsigned)(h[0] << 12 | h[1] << 8 | h[2] << 4 | h[3]));
                v += 5;
            }
        } else {
            v++;
            ok = put(out, outlen, &o, *v == 'n' || *v == 'r' || *v == 't' ? ' ' : (unsigned char)*v);
        }
        if (!ok)
            break;
    }
    return o;
}

/* The start of " key=" in [line, end) outside quoted values, or NULL. */
static const char *find_key(const char *line, const char *end, const char *key)
{
    size_t kl = strlen(key);
    int quoted = 0;
    for (const char *p = line; p < end; p++) {
        if (quoted) {
            if (*p == '\\')
                p++;
            else if (*p == '"')
                quoted = 0;
        } else if (*p == '"') {
            quoted = 1;
        } else if ((p == line || p[-1] == ' ') && (size_t)(end - p) > kl &&
                   strncmp(p, key, kl) == 0 && p[kl] == '=') {
            return p;
        }
    }
    return NULL;
}

/* Drops a character cut in two at the end of out[0..o). */
static size_t whole_chars(const char *out, size_t o)
{
    size_t i = o;
    while (i > 0 && ((unsigned char)out[i - 1] & 0xC0) == 0x80)
        i--;
    if (i == 0 || ((unsigned char)out[i - 1] & 0x80) == 0)
        return o;
    unsigned char lead = (unsigned char)out[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return o - (i - 1) < need ? i - 1 : o;
}

int vj_worker_error(const char *message, char *out, size_t outlen)
{
    if (outlen == 0)
        return 0;
    out[0] = '\0';
    if (message == NULL)
        return 0;
    const char *exit_line = NULL, *exit_end = NULL, *last = NULL, *last_end = NULL;
    for (const char *ln = message; *ln;) {
        const char *end = strchr(ln, '\n');
        if (end == NULL)
            end = ln + strlen(ln);
        if (find_key(ln, end, "exit_code"))
            exit_line = ln, exit_end = end;
        if (strspn(ln, " \t\r") < (size_t)(end - ln))
            last = ln, last_end = end;
        ln = *end ? end + 1 : end;
    }
    const char *ln = exit_line ? exit_line : last, *end = exit_line ? exit_end : last_end;
    if (ln == NULL)
        return 0;
    size_t o = 0;
    const char *m = exit_line ? find_key(ln, end, "msg") : NULL;
    if (m) {
        o = read_value(m + 4, end, out, outlen);
    } else {
        while (ln < end && (*ln == ' ' || *ln == '\t'))
            ln++;
        while (end > ln && (end[-1] == ' ' || end[-1] == '\r' || end[-1] == '\t'))
            end--;
        for (; ln < end && put(out, outlen, &o, (unsigned char)*ln); ln++)
            ;
    }
    o = whole_chars(out, o);
    out[o] = '\0';
    return o > 0;
}
