/* worker/data/shards.h - the shard list of a webdataset URI pattern.
 *
 * Owns: webdataset's brace notation (as the braceexpand package reads it):
 * "train-{000000..001023}.tar" is 1024 names, "{a,b}" alternatives, several
 * braces in one pattern (the last varies fastest), a name without braces is
 * itself. A range is zero-padded to the width of its longer bound when
 * either bound has a leading zero ("{08..10}" is 08 09 10).
 * Must not: fetch, list or check the shards; the names are only strings.
 *
 * What shards_new refuses, each with a message naming the pattern and the
 * byte where the fault is: a '{' without its '}' (or a '}' without its '{'),
 * nested braces, empty braces or an empty alternative, a range whose bounds
 * are not decimal numbers of at most 18 digits, a reversed range
 * ("{10..01}"), and a pattern that expands to more than the max_names given
 * (the count is computed before anything is built).
 */
#ifndef VITJOB_SHARDS_H
#define VITJOB_SHARDS_H

#include <stddef.h>

/* a sensible bound for max_names: a million shards */
#define SHARDS_MAX_DEFAULT 1000000u

typedef struct shards_list shards_list;

/* Expands pattern. On success the list is the caller's, freed with
 * shards_free; NULL with a message in err on a malformed pattern, more than
 * max_names names, or no memory. */
shards_list *shards_new(const char *pattern, size_t max_names, char *err, size_t errlen);
void shards_free(shards_list *l); /* accepts NULL */
size_t shards_count(const shards_list *l);
/* The i-th name (i < shards_count), borrowed from l. */
const char *shards_at(const shards_list *l, size_t i);

#endif
