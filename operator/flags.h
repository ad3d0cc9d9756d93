/* operator/flags.h - the vitjob-operator's command-line flags.
 *
 * Owns: the table of flags (one row each: name, type, default, bounds or
 * allowed values, help), the parser over it, and the --help text, printed
 * from the table. A flag's value is checked as the table says (a whole
 * number in its bounds, a number, one of its values); a bad one fails
 * naming the flag and the value.
 * Must not: act on a flag (operator/main.c does: the client, the Lease,
 * the planner), check what needs the system (whether a --planner file runs:
 * main.c; the --namespace names: nslist.h) or the rules between flags
 * (main.c: --retry-period < --renew-deadline < --lease-duration), or log.
 */
#ifndef VITJOB_FLAGS_H
#define VITJOB_FLAGS_H

#include <stddef.h>
#include <stdio.h>

/* The flags' values. Strings are borrowed: argv's, or the table's defaults. */
typedef struct {
    const char *kubeconfig;   /* NULL: $KUBECONFIG, else in-cluster, else ~/.kube/config */
    const char *ns;           /* --namespace; NULL or "": every namespace (nslist.h) */
    const char *metrics_addr;
    const char *lease_ns;     /* NULL: $POD_NAMESPACE, else vitjob-system (main.c) */
    const char *lease_name;
    const char *identity;     /* NULL: $POD_NAME, else host_pid (main.c) */
    const char *planner;      /* NULL: the vitjob-worker beside the binary; "none" */
    const char *log_level;    /* one of lib/log.h's level names */
    int leader_elect;
    int workers;
    double lease_duration, renew_deadline, retry_period;
} operator_flags;

typedef enum {
    FLAGS_RUN = 0, /* parsed: run */
    FLAGS_HELP,    /* -h or --help: print flags_help on stdout, exit 0 */
    FLAGS_VERSION, /* --version: print the version, exit 0 */
    FLAGS_UNKNOWN, /* an unknown flag, or one without its value: err says which */
    FLAGS_BAD,     /* a value the table refuses: err names the flag and the value */
} flags_result;

/* Sets every flag to its default, then parses argv[1..argc-1] in order;
 * stops at the first --help or --version (what follows is not looked at)
 * or at the first error. */
flags_result flags_parse(operator_flags *f, int argc, char **argv, char *err, size_t errlen);

/* The usage and one entry per flag of the table: its value, what it does,
 * its default. */
void flags_help(FILE *to);

#endif
