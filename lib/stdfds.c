/* lib/stdfds.c - see stdfds.h. Owns the start-up guard on descriptors 0, 1
 * and 2; no stdio here, since stdout or stderr may be the closed ones. */
#include "stdfds.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* write(2) of a whole string, ignoring failure (descriptor 2 may be closed) */
static void say(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

void stdfds_ensure(const char *prog, int exit_code)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        /* the lower ones are open, so open() returns fd itself */
        int nfd = open("/dev/null", (fd == 0 ? O_RDONLY : O_WRONLY) | O_NOCTTY);
        if (nfd >= 0 && nfd != fd) {
            int ok = dup2(nfd, fd) == fd;
            int e = errno;
            close(nfd);
            errno = e;
            nfd = ok ? fd : -1;
        }
        if (nfd < 0) {
            const char *why = strerror(errno);
            say(prog);
            say(": cannot open /dev/null onto a closed standard descriptor: ");
            say(why);
            say("\n");
            exit(exit_code);
        }
    }
}
