/* api/config_impl.h - what api/config.c lends api/config_load.c: the
 * context every message is written through, the message helpers, and a
 * value checked against its row and stored. Included by api/config.c and
 * api/config_load.c only.
 * Must not: be included outside them: everyone else uses config.h.
 */
#ifndef VITJOB_CONFIG_IMPL_H
#define VITJOB_CONFIG_IMPL_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "config_keys.h"

#define CONFIG_PATH_MAX 256 /* longest dotted key we look up */

typedef struct {
    const char *origin; /* prefix of every message; NULL = none (validation) */
    char *err;
    size_t errlen;
} config_ctx;

/* Writes "<origin>: <message>" into the caller's buffer, on one line.
 * Returns VJ_ERR_CONFIG. */
__attribute__((format(printf, 2, 3))) int config_fail(const config_ctx *c, const char *fmt, ...);

/* `"text"` with quotes, backslashes and control bytes escaped, cut at 80 bytes. */
void config_quote(char *out, size_t n, const char *s);

/* "string \"ten\"", "number 1.5", "boolean true", "null", "array", "object". */
void config_value_words(char *out, size_t n, const cJSON *v);

/* A NUL-terminated copy of s[0..n); NULL out of memory; caller frees. */
char *config_dup_range(const char *s, size_t n);

/* The row of the dotted `path`; NULL for none. */
const config_key *config_find_key(const char *path);

/* Checks v against row k and, only if it passes, stores it into cfg (a
 * model.preset applies the preset). Returns 0 or VJ_ERR_CONFIG. */
int config_apply_value(const config_ctx *c, vit_job_config *cfg, const config_key *k,
                       const cJSON *v);

#endif
