/* bench/comm_bench.c - the CPU collectives (worker/gang/comm.h on gloo) on
 * loopback, in the style of nccl-tests: for 2 and 4 ranks (processes
 * meeting at rank 0's rendezvous store) and message sizes from 1 KiB to
 * 256 MiB, the time of all-reduce, reduce-scatter and all-gather, their
 * algorithm bandwidth (size / time) and bus bandwidth (all-reduce x
 * 2(n-1)/n, the others x (n-1)/n), beside the raw throughput of loopback
 * TCP measured in the same run: one stream, and one connection carrying a
 * stream each way at once (what an exchange between two ranks moves).
 * Must not: assert anything (a benchmark prints; tests check behaviour).
 *
 * usage: comm_bench [--ranks 2,4] [--max-mib 256]
 *                   [--ops all-reduce,reduce-scatter,all-gather]
 */
#include <netinet/in.h>
#include <pthread.h>
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
#include "stdfds.h"
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

/* Listens on a loopback port; *a gets its address. */
static int listen_loopback(struct sockaddr_in *a)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof *a;
    if (ls < 0 || bind(ls, (struct sockaddr *)a, sizeof *a) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)a, &l) != 0) {
        perror("comm_bench: listen");
        exit(1);
    }
    return ls;
}

enum { TCP_CHUNK = 4 << 20 };
static const size_t tcp_total = (size_t)1 << 30;

/* Writes tcp_total bytes to s in TCP_CHUNK writes; 0 or -1. */
static int send_all(int s, const char *buf)
{
    for (size_t sent = 0; sent < tcp_total;) {
        ssize_t n = write(s, buf, TCP_CHUNK);
        if (n <= 0) return -1;
        sent += (size_t)n;
    }
    return 0;
}

/* Reads s to its end; the byte count. */
static size_t recv_all(int s, char *buf)
{
    size_t got = 0;
    for (ssize_t n; (n = read(s, buf, TCP_CHUNK)) > 0;) got += (size_t)n;
    return got;
}

typedef struct {
    int fd;
    char *buf;
} sender;

static void *send_thread(void *arg)
{
    sender *s = arg;
    send_all(s->fd, s->buf);
    shutdown(s->fd, SHUT_WR);
    return NULL;
}

/* GB/s of loopback TCP between two processes, 1 GiB in 4 MiB writes:
 * both_ways 0, one stream (the child writes, this process reads); 1, one
 * connection carrying 1 GiB each way at once (each process writes on a
 * thread and reads on another): the rate of one direction, what an
 * exchange between two ranks (a ring step at 2 ranks) can reach. */
static double raw_tcp_once(int both_ways)
{
    struct sockaddr_in a;
    int ls = listen_loopback(&a);
    char *buf = calloc(1, TCP_CHUNK), *rbuf = calloc(1, TCP_CHUNK);
    if (!buf || !rbuf) exit(1);
    pid_t p = fork();
    if (p == 0) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) _exit(1);
        if (!both_ways) _exit(send_all(s, buf) ? 1 : 0);
        sender sd = {s, buf};
        pthread_t t;
        if (pthread_create(&t, NULL, send_thread, &sd) != 0) _exit(1);
        size_t got = recv_all(s, rbuf);
        pthread_join(t, NULL);
        _exit(got == tcp_total ? 0 : 1);
    }
    int c = accept(ls, NULL, NULL);
    double t0 = mono_seconds();
    pthread_t t;
    sender sd = {c, buf};
    if (both_ways && pthread_create(&t, NULL, send_thread, &sd) != 0) exit(1);
    size_t got = recv_all(c, rbuf);
    if (both_ways) pthread_join(t, NULL);
    double el = mono_seconds() - t0;
    int st = 1;
    waitpid(p, &st, 0);
    close(c);
    close(ls);
    free(buf);
    free(rbuf);
    return got == tcp_total && st == 0 ? (double)tcp_total / el / 1e9 : 0.0;
}

/* The best of 3 runs (loopback's rate moves with the scheduler). */
static double raw_tcp_gbs(int both_ways)
{
    double best = 0;
    for (int i = 0; i < 3; i++) {
        double g = raw_tcp_once(both_ways);
        if (g > best) best = g;
    }
    return best;
}

typedef enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER } op_kind;
static const char *const op_names[] = {"all-reduce", "reduce-scatter", "all-gather"};

/* The sizes: x4 steps from 1 KiB to 1 MiB, then x2 steps (the range
 * training's gradients and parameters fall in). */
static size_t next_size(size_t bytes) { return bytes < (1u << 20) ? bytes * 4 : bytes * 2; }

/* Timed iterations for a message of bytes (at least ~0.3 s of transfer). */
static int iterations(size_t bytes)
{
    return bytes <= (1u << 20) ? 50 : bytes <= (8u << 20) ? 20 : bytes <= (64u << 20) ? 8 : 4;
}

/* One rank: every op and size; rank 0 writes "op size best median" lines
 * (seconds) to fd. */
static int run_rank(int rank, int world, const char *ep, size_t max_bytes, unsigned ops, int fd)
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
        if (!(ops & (1u << op))) continue;
        for (size_t bytes = 1024; bytes <= max_bytes && !rc; bytes = next_size(bytes)) {
            size_t count = bytes / sizeof(float), chunk = count / (size_t)world;
            if (chunk == 0) continue;
            int iters = iterations(bytes);
            double t[64];
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
                if (it >= 0) t[it] = mono_seconds() - t0;
            }
            if (rc) fprintf(stderr, "comm_bench rank %d: %s\n", rank, err);
            if (!rc && rank == 0) {
                for (int a = 1; a < iters; a++) /* insertion sort: best first */
                    for (int b = a; b > 0 && t[b] < t[b - 1]; b--) {
                        double x = t[b];
                        t[b] = t[b - 1];
                        t[b - 1] = x;
                    }
                char line[128];
                int n = snprintf(line, sizeof line, "%d %zu %.9f %.9f\n", op, chunk * world * 4,
                                 t[0], t[iters / 2]);
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
    stdfds_ensure("comm_bench", 1);
    int worlds[4] = {2, 4}, nworlds = 2;
    size_t max_mib = 256;
    unsigned ops = 7;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
            nworlds = sscanf(argv[++i], "%d,%d,%d,%d", &worlds[0], &worlds[1], &worlds[2],
                             &worlds[3]);
        } else if (strcmp(argv[i], "--max-mib") == 0 && i + 1 < argc) {
            max_mib = (size_t)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc) {
            const char *list = argv[++i];
            ops = 0;
            for (int op = 0; op < 3; op++)
                if (strstr(list, op_names[op])) ops |= 1u << op;
        } else {
            fprintf(stderr, "usage: comm_bench [--ranks 2,4] [--max-mib 256] "
                            "[--ops all-reduce,reduce-scatter,all-gather]\n");
            return 2;
        }
    }
    log_set_level_name("warn");
    signal(SIGPIPE, SIG_IGN);
    setenv("VITJOB_COMM_HOST", "127.0.0.1", 1);
    double tcp = raw_tcp_gbs(0), tcp2 = raw_tcp_gbs(1);
    printf("## CPU collectives (gloo) on loopback\n\n");
    printf("raw loopback TCP (best of 3, 1 GiB in 4 MiB writes): one stream %.2f GB/s; "
           "both ways at once %.2f GB/s each way\n\n", tcp, tcp2);
    printf("| op | ranks | size | time (us) | median (us) | algbw (GB/s) | busbw (GB/s) | "
           "busbw / TCP | busbw / TCP both ways |\n");
    printf("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    fflush(stdout);
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
                _exit(run_rank(r, n, ep, max_mib << 20, ops, fds[1]));
            }
        }
        close(fds[1]);
        FILE *in = fdopen(fds[0], "r");
        int op;
        size_t bytes;
        double t, med;
        while (in && fscanf(in, "%d %zu %lf %lf", &op, &bytes, &t, &med) == 4) {
            double alg = (double)bytes / t / 1e9;
            double bus = alg * (op == OP_ALLREDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n);
            char size[32];
            if (bytes >= (1u << 20))
                snprintf(size, sizeof size, "%zu MiB", bytes >> 20);
            else
                snprintf(size, sizeof size, "%zu KiB", bytes >> 10);
            printf("| %s | %d | %s | %.0f | %.0f | %.3f | %.3f | %.2f | %.2f |\n", op_names[op],
                   n, size, t * 1e6, med * 1e6, alg, bus, tcp > 0 ? bus / tcp : 0.0,
                   tcp2 > 0 ? bus / tcp2 : 0.0);
            fflush(stdout);
        }
        if (in) fclose(in);
        for (int r = 0; r < n && r < 16; r++) {
            int s;
            waitpid(pids[r], &s, 0);
            if (!WIFEXITED(s) || WEXITSTATUS(s) != 0) status = 1;
        }
    }
    double tcp_end = raw_tcp_gbs(0);
    printf("\nraw loopback TCP again after the collectives: one stream %.2f GB/s (a large "
           "change from the first means the machine's load moved during the run)\n", tcp_end);
    printf("busbw: all-reduce algbw x 2(n-1)/n, reduce-scatter and all-gather algbw x "
           "(n-1)/n (nccl-tests); time: the best of the timed iterations, rank 0; median: "
           "their median.\n");
    return status;
}
