/* operator/nslist.h - the namespaces the operator watches: the value of
 * --namespace, a comma-separated list of DNS-1123 labels ("" = all).
 *
 * Owns: parsing and validating that list (each name as the API server judges
 * a namespace name, duplicates refused), and the membership test the runner
 * uses so that an object from an unwatched namespace is never reconciled.
 * Must not: log or talk to the API server.
 */
#ifndef VITJOB_NSLIST_H
#define VITJOB_NSLIST_H

#include <stddef.h>

typedef struct {
    char **names; /* n names, in the order given */
    int n;        /* 0: every namespace */
} ns_list;

/* Parses s ("a,b,c"; spaces around a name are ignored; NULL or "" = every
 * namespace: n = 0). Returns 0, or -1 with *out empty and a message in err
 * naming the bad entry and why, e.g. "--namespace: 'Team_A' is not a valid
 * namespace name: ...". Free with ns_list_free. */
int ns_list_parse(const char *s, ns_list *out, char *err, size_t errlen);
/* 1 when ns is watched (always when the list is empty). */
int ns_list_contains(const ns_list *l, const char *ns);
/* The list joined back with ',' into buf ("" when empty): for logs. */
void ns_list_join(const ns_list *l, char *buf, size_t len);
void ns_list_free(ns_list *l); /* accepts NULL and an empty list */

#endif
