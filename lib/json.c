/* lib/json.c - see json.h.
 *
 * Owns: NULL-safe cJSON getters.
 * Must not: allocate or change the tree.
 */
#include "json.h"

const cJSON *json_get(const cJSON *o, const char *key)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

const cJSON *json_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = json_get(o, a);
    return b ? json_get(v, b) : v;
}

const char *json_str(const cJSON *o, const char *key)
{
    const cJSON *v = json_get(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

long long json_int(const cJSON *o, const char *key, long long dflt)
{
    const cJSON *v = json_get(o, key);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : dflt;
}
