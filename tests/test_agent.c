/* tests/test_agent.c - worker/gang/agent.c's choice of the local rank that
 * names a pod's failure (agent_pick_culprit): the cause, not its echo. A
 * child killed by a signal comes before one that exited for its own reason
 * (a code other than 1), which comes before one that exited 1 (the
 * retryable code a rank exits with when it lost a peer); among equals the
 * first; children that exited 0 are never named. The wait statuses are
 * real ones, from children that exit or are killed. */
#include "agent.h"

#include <criterion/criterion.h>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(agent, .timeout = 30);

/* The wait status of a child that exits with code (sig 0) or is killed by sig. */
static int status_of(int code, int sig)
{
    pid_t p = fork();
    cr_assert(p >= 0);
    if (p == 0) {
        if (sig) kill(getpid(), sig);
        _exit(code);
    }
    int st = 0;
    cr_assert_eq(waitpid(p, &st, 0), p);
    return st;
}

static int exited(int code) { return status_of(code, 0); }
static int killed(int sig) { return status_of(0, sig); }

Test(agent, a_child_killed_by_a_signal_is_named_ahead_of_ones_that_exited_retryably)
{
    int s[] = {exited(1), killed(SIGKILL), exited(1)};
    cr_assert_eq(agent_pick_culprit(s, 3), 1);
    int t[] = {killed(SIGKILL), exited(1)};
    cr_assert_eq(agent_pick_culprit(t, 2), 0);
    int u[] = {exited(1), exited(1), killed(SIGINT)}; /* not SIGSEGV: ASan would catch it */
    cr_assert_eq(agent_pick_culprit(u, 3), 2);
}

Test(agent, a_child_killed_by_a_signal_is_named_ahead_of_one_that_exited_for_its_own_reason)
{
    int s[] = {exited(3), killed(SIGKILL)};
    cr_assert_eq(agent_pick_culprit(s, 2), 1);
    int t[] = {exited(2), killed(SIGTERM), exited(1)};
    cr_assert_eq(agent_pick_culprit(t, 3), 1);
}

Test(agent, an_exit_for_its_own_reason_is_named_ahead_of_the_retryable_echo)
{
    int s[] = {exited(1), exited(2)};
    cr_assert_eq(agent_pick_culprit(s, 2), 1);
    int t[] = {exited(1), exited(0), exited(4)};
    cr_assert_eq(agent_pick_culprit(t, 3), 2);
}

Test(agent, among_equal_causes_the_first_and_exit_0_is_never_named)
{
    int s[] = {exited(0), exited(1), exited(1)};
    cr_assert_eq(agent_pick_culprit(s, 3), 1);
    int t[] = {killed(SIGKILL), killed(SIGTERM)};
    cr_assert_eq(agent_pick_culprit(t, 2), 0);
    int u[] = {exited(0), exited(0)};
    cr_assert_eq(agent_pick_culprit(u, 2), -1);
    cr_assert_eq(agent_pick_culprit(u, 0), -1);
}
