/* api/config_schema.h - the parts of other files that the config table writes.
 *
 * Owns: the text generated from api/config_keys.c's key table (config_describe)
 * into files that describe the same keys:
 *   - manifests/00-crd.yaml (and so its byte copy in the Helm chart,
 *     charts/vitjob-operator/crds/): the schema of every config key under
 *     spec.model, spec.data, spec.training(.optimizer) and spec.checkpoint:
 *     type, format, bounds, maxLength, pattern, default, enum, description;
 *   - README.md: the config reference table (key, type, default, meaning).
 * Each generated part sits between two marker lines of its file, which the
 * generator keeps and which name what goes between them:
 *     # BEGIN generated: training.optimizer ...     (YAML: that section's keys,
 *     # END generated: training.optimizer            at the marker's indentation)
 *     <!-- BEGIN generated: config-keys ... -->      (Markdown: the table)
 *     <!-- END generated: config-keys -->
 * Everything outside the markers is hand-written and copied as it is: in the
 * CRD the section objects (their descriptions, defaults, CEL rules), the
 * operator's keys, the status schema and the printer columns.
 * `make schema` rewrites the files (`vitjob-worker schema FILE`);
 * tests/schema.bats fails when a committed file differs from what it writes.
 * Must not: read or write files (callers pass text in and get text back).
 *
 * Errors: functions return 0, or VJ_ERR_CONFIG with one line in err.
 */
#ifndef VITJOB_CONFIG_SCHEMA_H
#define VITJOB_CONFIG_SCHEMA_H

#include <stddef.h>

#include "buf.h"

/* Appends the YAML schema properties of the keys directly in `section`
 * ("model", "training.optimizer", ...), each "name:" at `indent` spaces. */
int config_schema_crd_section(buf *out, const char *section, int indent, char *err, size_t errlen);

/* Appends the README's config reference table (header included). */
int config_schema_readme_table(buf *out, char *err, size_t errlen);

/* Appends `text` (len bytes; `origin` names it in messages) to out with every
 * generated region regenerated. Fails when a region has no end marker or
 * names no section, when two regions name the same section, when the file
 * has no region at all, or, in a file with YAML regions, when some key's
 * section has none (a new section needs its object and markers first). */
int config_schema_rewrite(buf *out, const char *text, size_t len, const char *origin, char *err,
                          size_t errlen);

#endif
