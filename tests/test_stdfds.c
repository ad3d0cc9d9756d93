/* tests/test_stdfds.c - lib/stdfds.c: each of descriptors 0, 1 and 2 that
 * is closed is /dev/null after stdfds_ensure, each open one is left as it
 * was; a file opened afterwards never takes 0, 1 or 2. Each case runs in a
 * child, whose descriptors it may close. */
#include "stdfds.h"

#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* What descriptor fd of this process is ("/dev/null", "pipe:[...]"). */
static const char *what(int fd, char *buf, size_t len)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, buf, len - 1);
    buf[n < 0 ? 0 : n] = '\0';
    return n < 0 ? "closed" : buf;
}

/* Runs in a child: closes the descriptors of mask (bit fd), calls
 * stdfds_ensure, and exits 0 when the closed ones are /dev/null, the open
 * ones what they were and a new file takes none of 0, 1, 2. */
static int child(int mask)
{
    char before[3][256], now[256];
    for (int fd = 0; fd <= 2; fd++) what(fd, before[fd], sizeof before[fd]);
    for (int fd = 0; fd <= 2; fd++)
        if (mask >> fd & 1) close(fd);
    stdfds_ensure("test_stdfds", 99);
    for (int fd = 0; fd <= 2; fd++) {
        const char *want = mask >> fd & 1 ? "/dev/null" : before[fd];
        if (strcmp(what(fd, now, sizeof now), want) != 0) return 10 + fd;
    }
    if ((fcntl(0, F_GETFL) & O_ACCMODE) != O_RDONLY && (mask & 1)) return 20;
    if ((fcntl(1, F_GETFL) & O_ACCMODE) != O_WRONLY && (mask & 2)) return 21;
    if ((fcntl(2, F_GETFD) & FD_CLOEXEC) != 0) return 22;
    int f = open("/proc/self/stat", O_RDONLY);
    return f > 2 ? 0 : 30;
}

static void run(int mask)
{
    fflush(NULL);
    pid_t p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) _exit(child(mask));
    int status = 0;
    cr_assert_eq(waitpid(p, &status, 0), p);
    cr_assert(WIFEXITED(status));
    cr_assert_eq(WEXITSTATUS(status), 0, "closed 0x%x: check %d failed", mask,
                 WEXITSTATUS(status));
}

Test(stdfds, closed_stdout_becomes_dev_null_and_a_new_file_does_not_take_it) { run(2); }
Test(stdfds, closed_stderr_becomes_dev_null) { run(4); }
Test(stdfds, closed_stdin_becomes_dev_null_read_only) { run(1); }
Test(stdfds, all_three_closed_become_dev_null) { run(7); }
Test(stdfds, open_descriptors_are_left_as_they_were) { run(0); }
