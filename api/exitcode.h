/* api/exitcode.h - every way a worker can end, and the exit code each gets.
 *
 * Owns: the error classes (vj_err) that worker functions return, and the one
 * table that maps each class to the exit codes of api/contract.h and says
 * whether the operator retries it. `make schema` writes docs/design.md's
 * copy of it (api/config_schema.c), `vitjob-worker exit-codes` prints it
 * from here; tests walk it.
 * Must not: hold messages for particular failures (they go into the
 * caller's err buffer), or decide anything about a job (operator/decide*.c
 * asks vj_exit_permanent).
 */
#ifndef VITJOB_EXITCODE_H
#define VITJOB_EXITCODE_H

#include <stddef.h>

#include "contract.h"

/* Error classes. Values start above any exit code, so that a function
 * that returns an exit code where a class is expected is caught by
 * vj_exit_code (it maps unknown values to VITJOB_EXIT_FAILURE and the
 * exit-code test fails). */
typedef enum {
    VJ_OK = 0,
    VJ_ERR_USAGE = 1000, /* the command line */
    VJ_ERR_CONFIG,       /* a config key or value, or two that do not go together */
    VJ_ERR_ENVIRONMENT,  /* a VITJOB_* environment variable */
    VJ_ERR_UNSUPPORTED,  /* asks for what this build cannot do yet */
    VJ_ERR_NO_DEVICE,    /* training.device=cuda without a usable GPU */
    VJ_ERR_OUTPUT,       /* an output path that cannot be written */
    VJ_ERR_INIT_WEIGHTS, /* model.init unreadable, malformed, mismatched or not finite */
    VJ_ERR_TOO_LARGE,    /* needs more memory than the process may have */
    VJ_ERR_DIVERGED,     /* the loss became NaN or infinite */
    VJ_ERR_DATA,         /* data files missing, unreadable or malformed */
    VJ_ERR_OUT_OF_MEMORY,/* an allocation failed below the checked limit */
    VJ_ERR_DEVICE_FAULT, /* the GPU reported an error while training */
    VJ_ERR_IO,           /* a write failed for a passing reason (disk full, I/O error) */
    VJ_ERR_RENDEZVOUS,   /* the ranks did not all meet within rendezvousTimeoutSeconds */
    VJ_ERR_PEER_LOST,    /* another rank died or stopped answering mid-run */
    VJ_ERR_STOPPED,      /* SIGTERM or SIGINT: exit code 128 + the signal */
    VJ_ERR_END
} vj_err;

typedef struct {
    vj_err err;
    const char *name;    /* as logged: class=NAME */
    int exit_code;       /* VITJOB_EXIT_*; for VJ_ERR_STOPPED, 128 + SIGTERM */
    int permanent;       /* 1: the operator fails the job; 0: restarts the gang */
    const char *meaning; /* one line for users */
} vj_err_row;

/* The table, one row per class (VJ_OK excluded), in enum order. */
const vj_err_row *vj_err_table(size_t *n);
/* The row of e, or NULL for a value that is not a class. */
const vj_err_row *vj_err_info(vj_err e);
/* The exit code of e (VITJOB_EXIT_OK for VJ_OK); stopped_by is the signal
 * for VJ_ERR_STOPPED. Unknown values give VITJOB_EXIT_FAILURE. */
int vj_exit_code(vj_err e, int stopped_by);
/* Whether a worker that exited with code fails its job for good. */
int vj_exit_permanent(int code);

#endif
