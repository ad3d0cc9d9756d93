/* worker/gang/agent.h - the pod's local agent (VITJOB_LOCAL_RANKS > 1, one
 * process per GPU: gpusPerReplica > 1), as torchrun's local agent is.
 *
 * Owns: starting one training process per local rank (this executable
 * again, with VITJOB_LOCAL_RANK set, and its share of the CPUs in
 * OMP_NUM_THREADS and of the GPUs in CUDA_VISIBLE_DEVICES where those are
 * the agent's to split), forwarding a stop signal to them, and deciding the
 * pod's exit code: once one of them dies or fails, the others are stopped
 * (SIGTERM, then SIGKILL after a grace) and the pod exits with that
 * failure's code when it is permanent, else with peer_lost's (retryable),
 * naming the local rank and how it ended.
 * Must not: train, parse configs or join the rendezvous (its children do),
 * or wait without a deadline once a child has failed.
 */
#ifndef VITJOB_AGENT_H
#define VITJOB_AGENT_H

#include <signal.h>
#include <stddef.h>

typedef struct {
    int local_ranks;             /* processes to start: local ranks 0..n-1 */
    int pod_rank;                /* VITJOB_RANK, for the global ranks in messages */
    char **argv;                 /* the command line to run again (argv[0] included) */
    int threads_set;             /* training.threads is set: leave OMP_NUM_THREADS alone */
    double grace_s;              /* after SIGTERM, before SIGKILL */
    const volatile sig_atomic_t *stop; /* set by the agent's SIGTERM/SIGINT handler */
} agent_options;

/* Which of the children that ended together names the pod's failure: the
 * cause rather than its echo. status[0..n) are waitpid statuses; the
 * strongest cause is a child killed by a signal, then one that exited
 * non-zero for its own reason (any code but 1), then one that exited 1 (the
 * retryable code a rank exits with when it loses a peer: the echo of
 * another's failure); among equals, the first. Returns its index, or -1
 * when every one exited 0. Pure. */
int agent_pick_culprit(const int *status, int n);

/* Runs the local ranks until all have exited and returns the pod's exit
 * code (0 when every one exited 0); err gets one line when it is not 0. */
int agent_run(const agent_options *o, char *err, size_t errlen);

#endif
