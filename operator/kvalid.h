/* operator/kvalid.h - the value formats a Kubernetes API server checks in the
 * objects the operator writes: DNS-1035 and DNS-1123 labels, DNS-1123
 * subdomains, qualified names (label keys, resource names), label values and
 * resource quantities, with the API server's own rules.
 *
 * Owns: the pure checks, so that the operator refuses a ViTJob whose
 * children a real server would refuse, naming the field, before any of them
 * is created.
 * Must not: allocate, log, or know anything about ViTJobs.
 *
 * Every kv_is_* returns 1 when s is valid, else 0 with a short reason in
 * why (the API server's wording where it has one), e.g. "must start with a
 * lowercase letter". why may be NULL.
 */
#ifndef VITJOB_KVALID_H
#define VITJOB_KVALID_H

#include <stddef.h>

#define KV_LABEL_MAX 63      /* DNS labels, label values, the name part of a qualified name */
#define KV_SUBDOMAIN_MAX 253 /* DNS-1123 subdomains */

/* [a-z]([-a-z0-9]*[a-z0-9])?, at most 63: Service names. */
int kv_is_dns1035_label(const char *s, char *why, size_t whylen);
/* [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63: pod hostname and subdomain. */
int kv_is_dns1123_label(const char *s, char *why, size_t whylen);
/* DNS-1123 labels joined by '.', at most 253: most object names. */
int kv_is_dns1123_subdomain(const char *s, char *why, size_t whylen);
/* [prefix/]name: prefix a DNS-1123 subdomain, name
 * ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9] of at most 63: label keys,
 * node selector keys, toleration keys, resource names. */
int kv_is_qualified_name(const char *s, char *why, size_t whylen);
/* "" or a name part as above: label and node selector values. */
int kv_is_label_value(const char *s, char *why, size_t whylen);

/* A resource quantity ("500m", "2", "1.5Gi", "1e3", "+4k"): the grammar of
 * k8s.io/apimachinery's ParseQuantity. On success returns 1 and *value (may
 * be NULL) is its value in base units (cores, bytes); else 0. */
int kv_parse_quantity(const char *s, long double *value, char *why, size_t whylen);

/* The regular expression the API server names when it refuses a quantity. */
#define KV_QUANTITY_REGEX "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"

#endif
