/* tests/rank_fixture.h - for tests that fork ranks meeting on loopback: a
 * free port for rank 0's store. Header-only (static), one copy per test. */
#ifndef VITJOB_TESTS_RANK_FIXTURE_H
#define VITJOB_TESTS_RANK_FIXTURE_H

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

/* A loopback port nobody listens on now, drawn below Linux's ephemeral
 * range (32768-60999): a port the kernel picked (bind to 0) is free again
 * once closed and the kernel may hand it to any other socket (gloo's
 * connections, another test's) before rank 0 binds it. Drawn from
 * VITJOB_TEST_PORTS ("LO-HI", within 1024-32767; default 20000-31999), so
 * that suites run side by side (tests/run.sh's lanes) draw from ranges of
 * their own. */
static int free_port(void)
{
    static unsigned seed;
    static int lo = 20000, n = 12000;
    if (!seed) {
        seed = (unsigned)getpid() * 2654435761u;
        const char *r = getenv("VITJOB_TEST_PORTS");
        int a, b;
        if (r && sscanf(r, "%d-%d", &a, &b) == 2 && 1024 <= a && a <= b && b <= 32767) {
            lo = a;
            n = b - a + 1;
        }
    }
    for (int tries = 0; tries < 200; tries++) {
        seed = seed * 1103515245u + 12345u;
        int port = lo + (int)((seed >> 8) % (unsigned)n);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        cr_assert(fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok) return port;
    }
    cr_assert_fail("no free loopback port in %d-%d", lo, lo + n - 1);
    return -1;
}

#endif
