/* tests/test_flags.c - operator/flags.c: the operator's flag table: the
 * defaults, every flag parsed into its field, a bad value refused naming the
 * flag and the value, an unknown or incomplete flag refused, --help and
 * --version stopping the parse, and --help printed from the table. */
#include "flags.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARGV(...) ((char *[]){"vitjob-operator", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof ARGV(__VA_ARGS__) / sizeof(char *)) - 1)
#define PARSE(f, err, ...) \
    flags_parse(&(f), ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), (err), sizeof(err))

Test(flags, no_flags_give_the_defaults)
{
    operator_flags f;
    char err[256] = "";
    char *argv[] = {"vitjob-operator", NULL};
    cr_assert_eq(flags_parse(&f, 1, argv, err, sizeof err), FLAGS_RUN, "%s", err);
    cr_assert_null(f.kubeconfig);
    cr_assert_null(f.ns);
    cr_assert_str_eq(f.metrics_addr, ":8080");
    cr_assert_null(f.lease_ns, "absent: $POD_NAMESPACE, else vitjob-system (main.c)");
    cr_assert_str_eq(f.lease_name, "vitjob-operator");
    cr_assert_null(f.identity);
    cr_assert_null(f.planner);
    cr_assert_str_eq(f.log_level, "info");
    cr_assert_eq(f.leader_elect, 0);
    cr_assert_eq(f.workers, 2);
    cr_assert_eq(f.lease_duration, 15);
    cr_assert_eq(f.renew_deadline, 10);
    cr_assert_eq(f.retry_period, 2);
}

Test(flags, every_flag_sets_its_field)
{
    operator_flags f;
    char err[256] = "";
    cr_assert_eq(PARSE(f, err, "--kubeconfig", "/k", "--namespace", "a,b", "--metrics-addr",
                       "127.0.0.1:0", "--leader-elect", "--lease-namespace", "ls",
                       "--lease-name", "ln", "--identity", "me", "--workers", "64",
                       "--log-level", "debug", "--lease-duration", "8", "--renew-deadline",
                       "6.5", "--retry-period", "1", "--planner", "none"),
                 FLAGS_RUN, "%s", err);
    cr_assert_str_eq(f.kubeconfig, "/k");
    cr_assert_str_eq(f.ns, "a,b");
    cr_assert_str_eq(f.metrics_addr, "127.0.0.1:0");
    cr_assert_eq(f.leader_elect, 1);
    cr_assert_str_eq(f.lease_ns, "ls");
    cr_assert_str_eq(f.lease_name, "ln");
    cr_assert_str_eq(f.identity, "me");
    cr_assert_eq(f.workers, 64);
    cr_assert_str_eq(f.log_level, "debug");
    cr_assert_eq(f.lease_duration, 8);
    cr_assert_eq(f.renew_deadline, 6.5);
    cr_assert_eq(f.retry_period, 1);
    cr_assert_str_eq(f.planner, "none");
    /* the last of a flag given twice wins */
    cr_assert_eq(PARSE(f, err, "--workers", "3", "--workers", "1"), FLAGS_RUN, "%s", err);
    cr_assert_eq(f.workers, 1);
}

Test(flags, a_bad_value_is_refused_naming_the_flag_and_the_value)
{
    operator_flags f;
    char err[256] = "";
    static const struct {
        const char *flag, *value, *want;
    } bad[] = {
        {"--workers", "0", "--workers '0': must be a whole number from 1 to 64"},
        {"--workers", "65", "--workers '65': must be a whole number from 1 to 64"},
        {"--workers", "2x", "--workers '2x': must be a whole number from 1 to 64"},
        {"--workers", "", "--workers '': must be a whole number from 1 to 64"},
        {"--lease-duration", "8s", "--lease-duration '8s': must be a number"},
        {"--retry-period", "", "--retry-period '': must be a number"},
        {"--log-level", "verbose", "--log-level 'verbose': must be debug, info, warn or error"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = {"vitjob-operator", (char *)bad[i].flag, (char *)bad[i].value, NULL};
        cr_assert_eq(flags_parse(&f, 3, argv, err, sizeof err), FLAGS_BAD, "%s %s", bad[i].flag,
                     bad[i].value);
        cr_assert_str_eq(err, bad[i].want);
    }
}

Test(flags, an_unknown_flag_or_one_without_its_value_is_refused_naming_it)
{
    operator_flags f;
    char err[256] = "";
    cr_assert_eq(PARSE(f, err, "--no-such-flag"), FLAGS_UNKNOWN);
    cr_assert_str_eq(err, "unknown or incomplete argument '--no-such-flag'");
    cr_assert_eq(PARSE(f, err, "--leader-elect", "--workers"), FLAGS_UNKNOWN);
    cr_assert_str_eq(err, "unknown or incomplete argument '--workers'");
    cr_assert_eq(PARSE(f, err, "--workers=2"), FLAGS_UNKNOWN, "no --flag=value spelling");
}

Test(flags, help_and_version_stop_the_parse_where_they_stand)
{
    operator_flags f;
    char err[256] = "";
    cr_assert_eq(PARSE(f, err, "--help"), FLAGS_HELP);
    cr_assert_eq(PARSE(f, err, "-h", "--no-such-flag"), FLAGS_HELP);
    cr_assert_eq(PARSE(f, err, "--workers", "0", "--help"), FLAGS_BAD, "in order: the bad value first");
    cr_assert_eq(PARSE(f, err, "--version", "--workers", "0"), FLAGS_VERSION);
    cr_assert_eq(PARSE(f, err, "--no-such-flag", "--version"), FLAGS_UNKNOWN);
}

Test(flags, help_names_every_flag_with_its_value_bounds_and_default)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    flags_help(m);
    fclose(m);
    static const char *const heads[] = {
        "usage: vitjob-operator [FLAG ...]\n", "\n  --kubeconfig FILE ", "\n  --namespace NS[,NS...] ",
        "\n  --metrics-addr [HOST]:PORT ", "\n  --leader-elect ", "\n  --lease-namespace NS ",
        "\n  --lease-name NAME ", "\n  --identity ID ", "\n  --workers N ", "\n  --log-level LEVEL ",
        "\n  --lease-duration SECONDS ", "\n  --renew-deadline SECONDS ",
        "\n  --retry-period SECONDS ", "\n  --planner PATH|none ", "\n  --version ",
        "\n  -h, --help "};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++)
        cr_assert(strstr(text, heads[i]), "--help lacks \"%s\":\n%s", heads[i], text);
    /* the words, wrapped lines joined */
    char *flat = strdup(text);
    size_t k = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '\n' && p[1] == ' ') {
            while (p[1] == ' ') p++;
            flat[k++] = ' ';
        } else {
            flat[k++] = *p;
        }
    }
    flat[k] = '\0';
    static const char *const words[] = {
        "ViTJobs reconciled at once. From 1 to 64. Default: 2.",
        "One of debug, info, warn or error. Default: info.",
        "renewed. Default: 15.", "--lease-duration. Default: 10.", "--renew-deadline. Default: 2.",
        "listen. Default: :8080.", "The Lease's name. Default: vitjob-operator."};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        cr_assert(strstr(flat, words[i]), "--help lacks \"%s\":\n%s", words[i], text);
    free(flat);
    /* every line fits 79 columns */
    for (char *p = text, *nl; *p; p = nl + 1) {
        nl = strchr(p, '\n');
        cr_assert(nl, "ends with a newline");
        cr_assert_leq(nl - p, 79, "a line longer than 79 columns: %.*s", (int)(nl - p), p);
    }
    free(text);
}
