/* tests/rank_fixture.h - for tests that fork ranks meeting on loopback: a
 * free port for rank 0's store. Header-only (static), one copy per test. */
#ifndef VITJOB_TESTS_RANK_FIXTURE_H
#define VITJOB_TESTS_RANK_FIXTURE_H

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

/* A loopback port nobody listens on now (the kernel's pick). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    close(fd);
    return ntohs(a.sin_port);
}

#endif
