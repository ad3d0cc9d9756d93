/* tests/test_nslist.c - operator/nslist.c: the --namespace list, each name
 * checked as a DNS-1123 label, the bad one named in the error. */
#include "nslist.h"

#include <criterion/criterion.h>

#include <string.h>

Test(nslist, empty_or_missing_means_every_namespace)
{
    char err[256] = "";
    ns_list l = {(char **)1, 7};
    cr_assert_eq(ns_list_parse(NULL, &l, err, sizeof err), 0, "%s", err);
    cr_assert_eq(l.n, 0);
    cr_assert(ns_list_contains(&l, "anything"), "an empty list watches every namespace");
    ns_list_free(&l);
    cr_assert_eq(ns_list_parse("", &l, err, sizeof err), 0, "%s", err);
    cr_assert_eq(l.n, 0);
    ns_list_free(&l);
}

Test(nslist, comma_separated_names_are_kept_in_order_and_only_they_are_watched)
{
    char err[256] = "", joined[128];
    ns_list l;
    cr_assert_eq(ns_list_parse("team-a,team-b, 3rd ", &l, err, sizeof err), 0, "%s", err);
    cr_assert_eq(l.n, 3);
    cr_assert_str_eq(l.names[0], "team-a");
    cr_assert_str_eq(l.names[1], "team-b");
    cr_assert_str_eq(l.names[2], "3rd", "spaces around a name are ignored");
    cr_assert(ns_list_contains(&l, "team-b"));
    cr_assert_not(ns_list_contains(&l, "team-c"), "an unlisted namespace is not watched");
    cr_assert_not(ns_list_contains(&l, NULL));
    ns_list_join(&l, joined, sizeof joined);
    cr_assert_str_eq(joined, "team-a,team-b,3rd");
    ns_list_free(&l);
    cr_assert_eq(ns_list_parse("solo", &l, err, sizeof err), 0, "%s", err);
    cr_assert_eq(l.n, 1, "a single namespace still works as before");
    cr_assert_str_eq(l.names[0], "solo");
    ns_list_free(&l);
}

Test(nslist, an_invalid_name_is_refused_and_named)
{
    static const char *const bad[][2] = {
        {"ok,Team_A", "'Team_A'"},    /* capitals and '_' */
        {"a.b", "'a.b'"},             /* a subdomain is not a namespace name */
        {"ok,-lead", "'-lead'"},
        {"ok,,other", "empty"},       /* a stray comma */
        {"ok,", "empty"},
        {"ok,other,ok", "'ok'"},      /* given twice */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        ns_list l = {NULL, 0};
        cr_assert_eq(ns_list_parse(bad[i][0], &l, err, sizeof err), -1, "'%s' accepted", bad[i][0]);
        cr_assert_eq(l.n, 0);
        cr_assert_null(l.names);
        cr_assert(strstr(err, "--namespace"), "%s", err);
        cr_assert(strstr(err, bad[i][1]), "'%s': the error names %s: %s", bad[i][0], bad[i][1],
                  err);
    }
    char long_name[80], err[256];
    memset(long_name, 'a', 64);
    long_name[64] = '\0';
    ns_list l;
    cr_assert_eq(ns_list_parse(long_name, &l, err, sizeof err), -1);
    cr_assert(strstr(err, "63"), "%s", err);
}
