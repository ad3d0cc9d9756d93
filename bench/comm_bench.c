/* bench/comm_bench.c - the CPU collectives (worker/dist/comm.h on gloo) on
 * loopback, in the style of nccl-tests: for 2 and 4 ranks (processes
 * meeting at rank 0's rendezvous store) and message sizes from 1 KiB to
 * 256 MiB, the time of all-reduce, reduce-scatter and all-gather, their
 * algorithm bandwidth (size / time) and bus bandwidth (all-reduce x
 * 2(n-1)/n, the others x (n-1)/n), beside the raw throughput of one
 * loopback TCP stream measured in the same run.
 * Must not: assert anything (a benchmark prints; tests check behaviour).
 *
 * usage: comm_bench [--ranks 2,4] [--max-mib 256]
 */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "log.h"
#include "rdzv.h"
#include "util.h"

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &l) != 0) {
        perror("comm_bench: socket");
        exit(1);
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* GB/s of one TCP stream over loopback: 1 GiB in 4 MiB writes. */
static double raw_tcp_gbs(void)
{
    const size_t chunk = 4u << 20, total = 1u << 30;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &l) != 0) {
        perror("comm_bench: listen");
        exit(1);
    }
    char *buf = calloc(1, chunk);
    pid_t p = fork();
    if (p == 0) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) _exit(1);
        for (size_t sent = 0; sent < total;) {
            ssize_t n = write(s, buf, chunk);
            if (n <= 0) _exit(1);
            sent += (size_t)n;
        }
        close(s);
        _exit(0);
    }
    int c = accept(ls, NULL, NULL);
    double t0 = mono_seconds();
    size_t got = 0;
    for (ssize_t n; (n = read(c, buf, chunk)) > 0;) got += (size_t)n;
    double t = mono_seconds() - t0;
    close(c);
    close(ls);
    waitpid(p, NULL, 0);
    free(buf);
    return got == total ? (double)total / t / 1e9 : 0.0;
}

typedef enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER } op_kind;
static const char *const op_names[] = {"all-reduce", "reduce-scatter", "all-gather"};

/* One rank: every op and size; rank 0 writes "op size seconds" lines to fd. */
static int run_rank(int rank, int world, const char *ep, size_t max_bytes, int fd)
{
    rdzv_options o = {.endpoint = ep, .rank = rank, .world_size = world, .timeout_s = 60};
    rdzv *z = NULL;
    comm *c = NULL;
    char err[512];
    if (rdzv_new(&z, &o, NULL, err, sizeof err) != 0 ||
        comm_new_cpu(&c, z, 120, err, sizeof err) != 0) {
        fprintf(stderr, "comm_bench rank %d: %s\n", rank, err);
        return 1;
    }
    float *buf = calloc(max_bytes / sizeof(float), sizeof(float));
    if (!buf) return 1;
    for (size_t i = 0; i < max_bytes / sizeof(float); i++) buf[i] = (float)(i % 7);
    int rc = 0;
    for (int op = 0; op < 3 && !rc; op++) {
        for (size_t bytes = 1024; bytes <= max_bytes && !rc; bytes *= 4) {
            size_t count = bytes / sizeof(float), chunk = count / (size_t)world;
            if (chunk == 0) continue;
            int iters = bytes <= (1u << 20) ? 50 : bytes <= (16u << 20) ? 10 : 3;
            double best = 1e30;
            for (int it = -1; it < iters && !rc; it++) { /* it -1: warm-up */
                if (comm_barrier(c, err, sizeof err) != 0) rc = 1;
                double t0 = mono_seconds();
                if (op == OP_ALLREDUCE)
                    rc |= comm_allreduce_sum(c, buf, count, err, sizeof err);
                else if (op == OP_REDUCE_SCATTER)
                    rc |= comm_reduce_scatter_sum(c, buf, chunk, err, sizeof err);
                else
                    rc |= comm_allgather(c, buf + (size_t)rank * chunk, buf, chunk, COMM_F32, err,
                                         sizeof err);
                double t = mono_seconds() - t0;
                if (it >= 0 && t < best) best = t;
            }
            if (rc) fprintf(stderr, "comm_bench rank %d: %s\n", rank, err);
            if (!rc && rank == 0) {
                char line[128];
                int n = snprintf(line, sizeof line, "%d %zu %.9f\n", op, chunk * world * 4, best);
                if (write(fd, line, (size_t)n) != n) rc = 1;
            }
        }
    }
    free(buf);
    comm_free(c);
    rdzv_free(z);
    return rc;
}

int main(int argc, char **argv)
{
    int worlds[4] = {2, 4}, nworlds = 2;
    size_t max_mib = 256;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
            nworlds = sscanf(argv[++i], "%d,%d,%d,%d", &worlds[0], &worlds[1], &worlds[2],
                             &worlds[3]);
        } else if (strcmp(argv[i], "--max-mib") == 0 && i + 1 < argc) {
            max_mib = (size_t)strtoul(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: comm_bench [--ranks 2,4] [--max-mib 256]\n");
            return 2;
        }
    }
    log_set_level_name("warn");
    signal(SIGPIPE, SIG_IGN);
    setenv("VITJOB_COMM_HOST", "127.0.0.1", 1);
    double tcp = raw_tcp_gbs();
    printf("## CPU collectives (gloo) on loopback\n\nraw loopback TCP, one stream: %.2f GB/s\n\n",
           tcp);
    printf("| op | ranks | size | time (us) | algbw (GB/s) | busbw (GB/s) | busbw / TCP |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    int status = 0;
    for (int w = 0; w < nworlds; w++) {
        const int n = worlds[w];
        char ep[64];
        snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
        int fds[2];
        if (pipe(fds) != 0) return 1;
        pid_t pids[16];
        for (int r = 0; r < n && r < 16; r++) {
            if ((pids[r] = fork()) == 0) {
                close(fds[0]);
                _exit(run_rank(r, n, ep, max_mib << 20, fds[1]));
            }
        }
        close(fds[1]);
        FILE *in = fdopen(fds[0], "r");
        int op;
        size_t bytes;
        double t;
        while (in && fscanf(in, "%d %zu %lf", &op, &bytes, &t) == 3) {
            double alg = (double)bytes / t / 1e9;
            double bus = alg * (op == OP_ALLREDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n);
            char size[32];
            if (bytes >= (1u << 20))
                snprintf(size, sizeof size, "%zu MiB", bytes >> 20);
            else
                snprintf(size, sizeof size, "%zu KiB", bytes >> 10);
            printf("| %s | %d | %s | %.0f | %.3f | %.3f | %.2f |\n", op_names[op], n, size,
                   t * 1e6, alg, bus, tcp > 0 ? bus / tcp : 0.0);
            fflush(stdout);
        }
        if (in) fclose(in);
        for (int r = 0; r < n; r++) {
            int s;
            waitpid(pids[r], &s, 0);
            if (!WIFEXITED(s) || WEXITSTATUS(s) != 0) status = 1;
        }
    }
    printf("\nbusbw: all-reduce algbw x 2(n-1)/n, reduce-scatter and all-gather algbw x "
           "(n-1)/n (nccl-tests); time: the best of the timed iterations, rank 0.\n");
    return status;
}
