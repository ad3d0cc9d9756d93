/* operator/workerline.h - the worker's own error, in its words, from a pod's
 * termination message (containerStatuses[].state.terminated.message), for
 * the ViTJob's Failed or Restarting condition and its Warning event.
 *
 * Owns: finding the worker's last line in the message (the file the worker
 * writes, lib/termmsg.h: `ts=... level=error comp=worker exit_code=N
 * class=NAME retried=... msg="..."`; or, under FallbackToLogsOnError, the
 * log's tail that ends with it) and reading its msg value back from logfmt.
 * Must not: do I/O or allocate; trust the message (any bytes a container
 * wrote: control characters become spaces, the text is cut at a whole
 * character).
 */
#ifndef VITJOB_WORKERLINE_H
#define VITJOB_WORKERLINE_H

#include <stddef.h>

/* What a condition or event quotes of it, at most (bytes, NUL included). */
#define VJ_WORKER_ERROR_MAX 600

/* What message says went wrong, into out (always NUL-terminated): the msg
 * value of its last line that holds exit_code=, else that whole line, else
 * the last line that is not blank (a worker that died without its line).
 * Returns 1 when out holds something, 0 when message is NULL or blank. */
int vj_worker_error(const char *message, char *out, size_t outlen);

#endif
