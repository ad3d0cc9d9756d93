/* tests/rank_fixture.h - for tests that fork ranks meeting on loopback: a
 * free port for rank 0's store. Header-only (static), one copy per test. */
#ifndef VITJOB_TESTS_RANK_FIXTURE_H
#define VITJOB_TESTS_RANK_FIXTURE_H

#include <netinet/in.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

/* A loopback port nobody listens on now, drawn below Linux's ephemeral
 * range (32768-60999): a port the kernel picked (bind to 0) is free again
 * once closed and the kernel may hand it to any other socket (gloo's
 * connections, another test's) before rank 0 binds it. */
static int free_port(void)
{
    static unsigned seed;
    if (!seed) seed = (unsigned)getpid() * 2654435761u;
    for (int tries = 0; tries < 200; tries++) {
        seed = seed * 1103515245u + 12345u;
        int port = 20000 + (int)((seed >> 8) % 12000);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        cr_assert(fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok) return port;
    }
    cr_assert_fail("no free loopback port in 20000-31999");
    return -1;
}

#endif
