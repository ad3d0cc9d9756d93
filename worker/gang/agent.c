/* worker/gang/agent.c - see agent.h. Children are polled (waitpid WNOHANG every
 * 50 ms) so that a signal between two checks is never lost. */
#include "agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "contract.h"
#include "exitcode.h"
#include "log.h"
#include "sysres.h"
#include "util.h"

static void nap(void)
{
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
}

/* The k-th entry of a comma-separated list into out, or 0 when it has
 * fewer. */
static int nth_item(const char *list, int k, char *out, size_t len)
{
    const char *p = list;
    for (int i = 0; i < k; i++) {
        p = strchr(p, ',');
        if (!p) return 0;
        p++;
    }
    size_t n = strcspn(p, ",");
    if (n == 0 || n >= len) return 0;
    memcpy(out, p, n);
    out[n] = '\0';
    return 1;
}

/* In the child: its environment, then this executable again. */
static void exec_child(const agent_options *o, int k, int threads, const char *gpus)
{
    char v[64];
    snprintf(v, sizeof v, "%d", k);
    setenv(VJ_ENV_LOCAL_RANK, v, 1);
    if (threads > 0) {
        snprintf(v, sizeof v, "%d", threads);
        setenv("OMP_NUM_THREADS", v, 1);
    }
    char gpu[256];
    if (gpus && nth_item(gpus, k, gpu, sizeof gpu)) setenv("CUDA_VISIBLE_DEVICES", gpu, 1);
    execv("/proc/self/exe", o->argv);
    fprintf(stderr, "vitjob-worker local agent: cannot run /proc/self/exe: %s\n",
            strerror(errno));
    _exit(127);
}

/* How a child ended, for messages: "exited 2" or "was killed by signal 9". */
static void describe(int status, char *out, size_t len)
{
    if (WIFEXITED(status))
        snprintf(out, len, "exited %d", WEXITSTATUS(status));
    else
        snprintf(out, len, "was killed by signal %d", WTERMSIG(status));
}

/* How strong a cause a wait status is (lower: stronger; 3: not a failure). */
static int cause_rank(int status)
{
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 3;
    return !WIFEXITED(status) ? 0 : WEXITSTATUS(status) != 1 ? 1 : 2;
}

int agent_pick_culprit(const int *status, int n)
{
    int culprit = -1, best = 3;
    for (int i = 0; i < n; i++) {
        int r = cause_rank(status[i]);
        if (r < best) {
            best = r;
            culprit = i;
        }
    }
    return culprit;
}

static void signal_all(const pid_t *pids, int n, int sig)
{
    for (int k = 0; k < n; k++)
        if (pids[k] > 0) kill(pids[k], sig);
}

int agent_run(const agent_options *o, char *err, size_t errlen)
{
    const int n = o->local_ranks;
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    int *ended_rank = calloc((size_t)n, sizeof *ended_rank);
    int *ended_status = calloc((size_t)n, sizeof *ended_status);
    if (!pids || !ended_rank || !ended_status) {
        free(pids);
        free(ended_rank);
        free(ended_status);
        snprintf(err, errlen, "local agent: out of memory");
        return vj_exit_code(VJ_ERR_OUT_OF_MEMORY, 0);
    }
    /* the CPUs split between the local ranks, unless the config or the
     * environment already says how many threads each takes */
    int threads = 0;
    const char *omp = getenv("OMP_NUM_THREADS");
    if (!o->threads_set && !(omp && *omp)) {
        char src[64];
        threads = sysres_cpus("", 0, src, sizeof src) / n;
        if (threads < 1) threads = 1;
    }
    /* one GPU each where the agent was given a list of at least n */
    const char *gpus = getenv("CUDA_VISIBLE_DEVICES");
    char tmp[256];
    if (gpus && !nth_item(gpus, n - 1, tmp, sizeof tmp)) gpus = NULL;
    fflush(NULL);
    int started = 0;
    for (int k = 0; k < n; k++) {
        pid_t p = fork();
        if (p == 0) exec_child(o, k, threads, gpus);
        if (p < 0) {
            snprintf(err, errlen, "local agent: cannot start local rank %d: %s", k,
                     strerror(errno));
            break;
        }
        pids[k] = p;
        started++;
        LOG_INFO("agent", "event=started local_rank=%d global_rank=%d pid=%ld threads=%d%s%s", k,
                 o->pod_rank * n + k, (long)p, threads, gpus ? " gpu=" : "",
                 gpus ? LOGV(nth_item(gpus, k, tmp, sizeof tmp) ? tmp : "") : "");
    }
    int code = 0, failed = started < n, forwarded = 0, left = started;
    double deadline = 0.0;
    if (failed) {
        code = vj_exit_code(VJ_ERR_OUT_OF_MEMORY, 0);
        signal_all(pids, n, SIGTERM);
        deadline = mono_seconds() + o->grace_s;
    }
    while (left > 0) {
        if (o->stop && *o->stop && !forwarded) { /* the pod is asked to stop */
            forwarded = 1;
            LOG_INFO("agent", "event=stopping signal=%d local_ranks=%d", (int)*o->stop, left);
            signal_all(pids, n, (int)*o->stop);
            if (!failed) deadline = mono_seconds() + o->grace_s;
        }
        /* every child that has ended since the last look */
        int ended = 0, culprit = -1, culprit_status = 0, status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
            int k = 0;
            while (k < n && pids[k] != p) k++;
            if (k == n) continue; /* not ours */
            pids[k] = 0;
            left--;
            ended_rank[ended] = k;
            ended_status[ended] = status;
            ended++;
            char how[64];
            describe(status, how, sizeof how);
            LOG_INFO("agent", "event=exited local_rank=%d global_rank=%d how=%s", k,
                     o->pod_rank * n + k, LOGV(how));
        }
        int i = agent_pick_culprit(ended_status, ended);
        if (i >= 0) {
            culprit = ended_rank[i];
            culprit_status = ended_status[i];
        }
        if (p < 0 && errno == ECHILD) left = 0;
        if (culprit >= 0 && !failed && !forwarded) {
            failed = 1;
            int c = WIFEXITED(culprit_status) ? WEXITSTATUS(culprit_status)
                                              : 128 + WTERMSIG(culprit_status);
            code = WIFEXITED(culprit_status) && vj_exit_permanent(c)
                       ? c : vj_exit_code(VJ_ERR_PEER_LOST, 0);
            char how[64];
            describe(culprit_status, how, sizeof how);
            snprintf(err, errlen, "local rank %d (global rank %d) %s; the pod's other local "
                     "ranks were stopped", culprit, o->pod_rank * n + culprit, how);
            signal_all(pids, n, SIGTERM);
            deadline = mono_seconds() + o->grace_s;
        }
        if (ended || left == 0) continue;
        if ((failed || forwarded) && deadline > 0 && mono_seconds() > deadline) {
            LOG_WARN("agent", "event=kill local_ranks=%d reason=\"still running %.0f s after "
                     "SIGTERM\"", left, o->grace_s);
            signal_all(pids, n, SIGKILL);
            deadline = 0;
        }
        nap();
    }
    free(pids);
    free(ended_rank);
    free(ended_status);
    if (!failed && forwarded) {
        snprintf(err, errlen, "stopped by signal %d; the local ranks stopped", (int)*o->stop);
        return vj_exit_code(VJ_ERR_STOPPED, (int)*o->stop);
    }
    return code;
}
