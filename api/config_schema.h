/* api/config_schema.h - the parts of other files that the config and exit-code tables write.
 *
 * Owns: the text generated from api/config_keys.c's key table (config_describe)
 * into files that describe the same keys, and from api/exitcode.c's table
 * (vj_err_table) into the design:
 *   - manifests/00-crd.yaml (and so its byte copy in the Helm chart,
 *     charts/vitjob-operator/crds/): the schema of every config key under
 *     spec.model, spec.data, spec.training(.optimizer) and spec.checkpoint:
 *     type, format, bounds, maxLength, pattern, default, enum, description;
 *   - README.md: the config reference table (key, type, default, meaning);
 *   - docs/design.md: the summary of the spec's config sections (every key
 *     by name, an enum's values) and the exit-code table (class, exit code,
 *     retried, meaning).
 * The operator links none of it (the Makefile leaves this file out of it).
 * Each generated part sits between two marker lines of its file, which the
 * generator keeps and which name what goes between them:
 *     # BEGIN generated: training.optimizer ...     (YAML: that section's keys,
 *     # END generated: training.optimizer            at the marker's indentation)
 *     <!-- BEGIN generated: config-keys ... -->      (Markdown: the README's table;
 *     <!-- END generated: config-keys -->             exit-codes: the exit codes)
 *     # BEGIN generated: config-summary ...          (the spec summary, at the
 *     # END generated: config-summary                marker's indentation)
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

/* Appends one line per top-level config section, at `indent` spaces:
 * "model:      {preset, ..., initHead: new | keep}", the keys in table order
 * (an enum's with its values, a section's inside it as its own mapping),
 * wrapped at 100 columns under the first key. */
int config_schema_spec_summary(buf *out, int indent, char *err, size_t errlen);

/* Appends the exit-code table of api/exitcode.c (header included): one row
 * "| `class` | code | no or yes (retried) | meaning |" per class, in order. */
int config_schema_exit_codes_table(buf *out, char *err, size_t errlen);

/* Appends `text` (len bytes; `origin` names it in messages) to out with every
 * generated region regenerated. Fails when a region has no end marker or
 * names no section, when two regions name the same section, when the file
 * has no region at all, or, in a file with YAML regions, when some key's
 * section has none (a new section needs its object and markers first). */
int config_schema_rewrite(buf *out, const char *text, size_t len, const char *origin, char *err,
                          size_t errlen);

#endif
