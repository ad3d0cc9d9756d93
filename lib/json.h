/* lib/json.h - reading cJSON trees without NULL checks at every step.
 *
 * Owns: the getters every module wants: a member of an object, as a
 * string, as an integer, two levels down. Each takes NULL or a non-object
 * and answers "absent".
 * Must not: allocate or change the tree. Returned pointers are borrowed from
 * the tree and live as long as it does.
 */
#ifndef VITJOB_JSON_H
#define VITJOB_JSON_H

#include <cjson/cJSON.h>

/* o[key], or NULL when o is not an object or has no such key. */
const cJSON *json_get(const cJSON *o, const char *key);
/* o[a][b] (b may be NULL: o[a]). */
const cJSON *json_at(const cJSON *o, const char *a, const char *b);
/* o[key] when it is a string, else NULL. */
const char *json_str(const cJSON *o, const char *key);
/* o[key] when it is a number (truncated to an integer), else dflt. */
long long json_int(const cJSON *o, const char *key, long long dflt);

#endif
