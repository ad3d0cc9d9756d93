/* operator/flags.c - the vitjob-operator's flags: the table, its parser and
 * --help (flags.h).
 *
 * Owns: one row per flag. Must not: act on a flag, or log.
 */
#include "flags.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    FLAG_STRING, /* any text */
    FLAG_INT,    /* a whole number in [min, max] */
    FLAG_NUMBER, /* a number (seconds) */
    FLAG_CHOICE, /* one of choices */
    FLAG_SWITCH, /* no value: sets the int to 1 */
    FLAG_HELP,   /* no value: flags_parse returns FLAGS_HELP */
    FLAG_VERSION /* no value: flags_parse returns FLAGS_VERSION */
} flag_type;

typedef struct {
    const char *name;           /* "--workers" */
    const char *alias;          /* another spelling ("-h"), or NULL */
    const char *value;          /* what --help calls the value ("N"); NULL: takes none */
    flag_type type;
    size_t off;                 /* offsetof(operator_flags, field) */
    const char *dflt;           /* parsed as if given before argv; NULL: none (the help says) */
    double min, max;            /* FLAG_INT */
    const char *const *choices; /* FLAG_CHOICE: NULL-terminated */
    const char *help;
} flag_row;

/* The _Generic makes the build fail when a row's type does not match its field. */
#define AT(f, T) (offsetof(operator_flags, f) + 0 * _Generic(((operator_flags *)0)->f, T: 0))
#define STRING(f) FLAG_STRING, AT(f, const char *)
#define INT(f) FLAG_INT, AT(f, int)
#define NUMBER(f) FLAG_NUMBER, AT(f, double)
#define CHOICE(f) FLAG_CHOICE, AT(f, const char *)
#define SWITCH(f) FLAG_SWITCH, AT(f, int)

static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL};

/* Adding a flag: a field in flags.h, a row here, its use in main.c; the
 * chart (charts/vitjob-operator/templates/deployment.yaml) and
 * manifests/02-operator.yaml may pass only flags of this table
 * (tests/operator.bats). */
static const flag_row flags[] = {
    {"--kubeconfig", NULL, "FILE", STRING(kubeconfig), NULL, 0, 0, NULL,
     "The cluster and credentials. Absent: $KUBECONFIG, else the in-cluster service "
     "account (when $KUBERNETES_SERVICE_HOST is set), else ~/.kube/config."},
    {"--namespace", NULL, "NS[,NS...]", STRING(ns), NULL, 0, 0, NULL,
     "The namespaces whose ViTJobs it manages, comma-separated DNS-1123 labels (an informer "
     "per resource per namespace, one work queue). Absent or \"\": every namespace. A bad "
     "name exits 2."},
    {"--metrics-addr", NULL, "[HOST]:PORT", STRING(metrics_addr), ":8080", 0, 0, NULL,
     "Where /metrics, /healthz and /readyz listen."},
    {"--leader-elect", NULL, NULL, SWITCH(leader_elect), NULL, 0, 0, NULL,
     "Elect a leader through a Lease: only the leader acts, the others stand by."},
    {"--lease-namespace", NULL, "NS", STRING(lease_ns), NULL, 0, 0, NULL,
     "The Lease's namespace. Absent: $POD_NAMESPACE, else vitjob-system."},
    {"--lease-name", NULL, "NAME", STRING(lease_name), "vitjob-operator", 0, 0, NULL,
     "The Lease's name."},
    {"--identity", NULL, "ID", STRING(identity), NULL, 0, 0, NULL,
     "This replica's name in the Lease. Absent: $POD_NAME, else HOST_PID."},
    {"--workers", NULL, "N", INT(workers), "2", 1, 64, NULL,
     "ViTJobs reconciled at once."},
    {"--log-level", NULL, "LEVEL", CHOICE(log_level), "info", 0, 0, log_levels,
     "The lowest level logged."},
    {"--lease-duration", NULL, "SECONDS", NUMBER(lease_duration), "15", 0, 0, NULL,
     "A standby takes over this long after it last saw the Lease renewed."},
    {"--renew-deadline", NULL, "SECONDS", NUMBER(renew_deadline), "10", 0, 0, NULL,
     "A leader that could not renew for this long stops acting; less than "
     "--lease-duration."},
    {"--retry-period", NULL, "SECONDS", NUMBER(retry_period), "2", 0, 0, NULL,
     "Between two Lease calls; more than 0 and less than --renew-deadline."},
    {"--planner", NULL, "PATH|none", STRING(planner), NULL, 0, 0, NULL,
     "The program that sizes GPU jobs before their first pods (`vitjob-worker plan`, "
     "operator/admission.h). Absent: the vitjob-worker beside this binary, if there is "
     "one; none: no admission planning. A PATH that is not an executable exits 2."},
    {"--version", NULL, NULL, FLAG_VERSION, 0, NULL, 0, 0, NULL,
     "Print the release, the commit and what it talks over, and exit."},
    {"--help", "-h", NULL, FLAG_HELP, 0, NULL, 0, 0, NULL, "Print this help and exit."},
};
#define N_FLAGS (sizeof flags / sizeof flags[0])

/* "a, b, c or d" of a choice's values, into buf. */
static const char *choices_words(const char *const *c, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; c[i] && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                 i == 0 ? "" : c[i + 1] ? ", " : " or ", c[i]);
    return buf;
}

/* Sets the row's field from v: 0, or -1 with err naming the flag and v. */
static int set_value(operator_flags *f, const flag_row *r, const char *v, char *err,
                     size_t errlen)
{
    void *at = (char *)f + r->off;
    char *end;
    errno = 0;
    switch (r->type) {
    case FLAG_STRING:
        *(const char **)at = v;
        return 0;
    case FLAG_INT: {
        long n = strtol(v, &end, 10);
        if (*v && !*end && !errno && n >= r->min && n <= r->max) {
            *(int *)at = (int)n;
            return 0;
        }
        snprintf(err, errlen, "%s '%s': must be a whole number from %.0f to %.0f", r->name, v,
                 r->min, r->max);
        return -1;
    }
    case FLAG_NUMBER: {
        double x = strtod(v, &end);
        if (*v && !*end) {
            *(double *)at = x;
            return 0;
        }
        snprintf(err, errlen, "%s '%s': must be a number", r->name, v);
        return -1;
    }
    case FLAG_CHOICE: {
        for (size_t i = 0; r->choices[i]; i++)
            if (strcmp(v, r->choices[i]) == 0) {
                *(const char **)at = r->choices[i];
                return 0;
            }
        char words[256];
        snprintf(err, errlen, "%s '%s': must be %s", r->name, v,
                 choices_words(r->choices, words, sizeof words));
        return -1;
    }
    case FLAG_SWITCH:
        *(int *)at = 1;
        return 0;
    case FLAG_HELP:
    case FLAG_VERSION:
        break;
    }
    return 0;
}

flags_result flags_parse(operator_flags *f, int argc, char **argv, char *err, size_t errlen)
{
    *f = (operator_flags){0};
    for (size_t k = 0; k < N_FLAGS; k++)
        if (flags[k].dflt && set_value(f, &flags[k], flags[k].dflt, err, errlen) != 0)
            return FLAGS_BAD; /* a row's default its own check refuses: the table is wrong */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const flag_row *r = NULL;
        for (size_t k = 0; k < N_FLAGS && !r; k++)
            if (strcmp(a, flags[k].name) == 0 || (flags[k].alias && strcmp(a, flags[k].alias) == 0))
                r = &flags[k];
        if (r && r->type == FLAG_HELP) return FLAGS_HELP;
        if (r && r->type == FLAG_VERSION) return FLAGS_VERSION;
        if (!r || (r->value && i + 1 >= argc)) {
            snprintf(err, errlen, "unknown or incomplete argument '%s'", a);
            return FLAGS_UNKNOWN;
        }
        if (set_value(f, r, r->value ? argv[++i] : NULL, err, errlen) != 0) return FLAGS_BAD;
    }
    return FLAGS_RUN;
}

/* words, wrapped at 79 columns; every line but the first indented by indent. */
static void wrap(FILE *to, const char *words, int col, int indent)
{
    const char *p = words;
    while (*p) {
        size_t n = strcspn(p, " ");
        if (col > indent && col + 1 + (int)n > 79) {
            fprintf(to, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', to);
            col++;
        }
        fwrite(p, 1, n, to);
        col += (int)n;
        p += n;
        while (*p == ' ') p++;
    }
    fputc('\n', to);
}

void flags_help(FILE *to)
{
    enum { INDENT = 30 };
    fprintf(to, "usage: vitjob-operator [FLAG ...]\n"
                "       vitjob-operator --version\n"
                "\n"
                "The ViTJob operator: reconciles ViTJobs, serves /metrics and the probes.\n"
                "Flags:\n");
    for (size_t k = 0; k < N_FLAGS; k++) {
        const flag_row *r = &flags[k];
        char head[128], text[1024], words[256];
        int n = snprintf(head, sizeof head, "  %s%s%s%s%s", r->alias ? r->alias : "",
                         r->alias ? ", " : "", r->name, r->value ? " " : "",
                         r->value ? r->value : "");
        size_t used = (size_t)snprintf(text, sizeof text, "%s", r->help);
        if (r->type == FLAG_CHOICE && used < sizeof text)
            used += (size_t)snprintf(text + used, sizeof text - used, " One of %s.",
                                     choices_words(r->choices, words, sizeof words));
        if (r->type == FLAG_INT && used < sizeof text)
            used += (size_t)snprintf(text + used, sizeof text - used, " From %.0f to %.0f.",
                                     r->min, r->max);
        if (r->dflt && used < sizeof text)
            snprintf(text + used, sizeof text - used, " Default: %s.", r->dflt);
        if (n >= INDENT - 1) /* the text on a line of its own */
            fprintf(to, "%s\n%*s", head, INDENT, "");
        else
            fprintf(to, "%-*s", INDENT, head);
        wrap(to, text, INDENT, INDENT);
    }
}
