/* lib/yaml_json.h - one YAML document as a cJSON tree, with libyaml.
 *
 * Owns: the one YAML -> JSON conversion of the project, for the worker's
 * config files (scalars resolved as YAML 1.1 does, aliases refused: a config
 * should say each value once) and for kubeconfig files (every scalar a
 * string, aliases resolved, as client-go reads them).
 * Must not: know what the document means.
 */
#ifndef VITJOB_YAML_JSON_H
#define VITJOB_YAML_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct {
    int typed_scalars; /* 1: plain scalars may be null, bool or number (YAML 1.1; quoted ones and
                          !!str stay strings; 0123 stays a string); 0: every scalar a string */
    int aliases;       /* 1: *name repeats the node &name marks; 0: an alias is an error */
} yaml_json_opts;

/* Parses the one document of text (len bytes; NUL bytes are an error).
 * Returns 0 with *out the tree (caller frees with cJSON_Delete; NULL for an
 * empty document), or -1 with "invalid YAML at line L column C: problem"
 * (or "out of memory ...") in err. A second document is an error. */
int yaml_json_parse(const char *text, size_t len, const yaml_json_opts *opts, cJSON **out,
                    char *err, size_t errlen);

#endif
