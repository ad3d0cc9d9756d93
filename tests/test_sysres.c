/* tests/test_sysres.c - lib/sysres.c: the CPUs and memory a process may
 * use, read from fake /proc and cgroup trees (v2 and v1, in a container's
 * own cgroup namespace and without one). */
#include "sysres.h"

#include <criterion/criterion.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[64];

static void make_root(void)
{
    snprintf(root, sizeof root, "/tmp/test_sysres_XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void remove_root(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(sysres, .init = make_root, .fini = remove_root);

/* Writes text to root/path, making its directories. */
static void put(const char *path, const char *text)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", root, path);
    for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        mkdir(p, 0755);
        *s = '/';
    }
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

Test(sysres, a_v2_quota_of_one_and_a_half_cpus_gives_one_thread_on_a_64_cpu_node)
{
    put("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
    put("sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "150000 100000\n");
    put("sys/fs/cgroup/kubepods/pod1/cpu.max", "max 100000\n");
    char src[64];
    cr_assert_eq(sysres_cpus(root, 64, src, sizeof src), 1);
    cr_assert_str_eq(src, "cgroup cpu.max");
}

Test(sysres, the_smallest_quota_on_the_way_to_the_root_wins)
{
    put("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
    put("sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/kubepods/pod1/cpu.max", "200000 100000\n");
    put("sys/fs/cgroup/kubepods/cpu.max", "800000 100000\n");
    cr_assert_eq(sysres_cpus(root, 64, NULL, 0), 2);
}

Test(sysres, in_its_own_cgroup_namespace_a_container_reads_the_mount_root)
{
    /* cgroupns: the container sees itself as "/" */
    put("proc/self/cgroup", "0::/\n");
    put("sys/fs/cgroup/cpu.max", "400000 100000\n");
    cr_assert_eq(sysres_cpus(root, 64, NULL, 0), 4);
    /* no namespace: the host's path does not exist in the container's mount */
    put("proc/self/cgroup", "0::/kubepods/pod9/ctr\n");
    cr_assert_eq(sysres_cpus(root, 64, NULL, 0), 4);
}

Test(sysres, affinity_below_the_quota_decides_and_no_limit_keeps_the_affinity)
{
    put("proc/self/cgroup", "0::/\n");
    put("sys/fs/cgroup/cpu.max", "400000 100000\n");
    char src[64];
    cr_assert_eq(sysres_cpus(root, 2, src, sizeof src), 2);
    cr_assert_str_eq(src, "affinity");
    put("sys/fs/cgroup/cpu.max", "max 100000\n");
    cr_assert_eq(sysres_cpus(root, 48, src, sizeof src), 48);
    cr_assert_str_eq(src, "affinity");
    put("sys/fs/cgroup/cpu.max", "50000 100000\n");
    cr_assert_eq(sysres_cpus(root, 48, src, sizeof src), 1, "half a CPU is still one thread");
}

Test(sysres, a_v1_cfs_quota_limits_the_cpus)
{
    put("proc/self/cgroup", "12:memory:/kubepods/p\n4:cpu,cpuacct:/kubepods/p\n");
    put("sys/fs/cgroup/cpu,cpuacct/kubepods/p/cpu.cfs_quota_us", "300000\n");
    put("sys/fs/cgroup/cpu,cpuacct/kubepods/p/cpu.cfs_period_us", "100000\n");
    char src[64];
    cr_assert_eq(sysres_cpus(root, 16, src, sizeof src), 3);
    cr_assert_str_eq(src, "cgroup cpu.cfs_quota_us");
    put("sys/fs/cgroup/cpu,cpuacct/kubepods/p/cpu.cfs_quota_us", "-1\n");
    cr_assert_eq(sysres_cpus(root, 16, NULL, 0), 16);
}

Test(sysres, without_a_root_override_the_count_is_at_least_one_and_at_most_the_affinity)
{
    int n = sysres_cpus("", 0, NULL, 0);
    cr_assert_geq(n, 1);
    cr_assert_leq(n, sysconf(_SC_NPROCESSORS_ONLN));
}

Test(sysres, memory_available_is_the_cgroup_limit_minus_usage_when_below_memavailable)
{
    put("proc/meminfo", "MemTotal: 65000000 kB\nMemAvailable: 60000000 kB\n");
    put("proc/self/cgroup", "0::/pod\n");
    put("sys/fs/cgroup/pod/memory.max", "2147483648\n");
    put("sys/fs/cgroup/pod/memory.current", "147483648\n");
    char src[64];
    cr_assert_eq(sysres_memory_available(root, src, sizeof src), 2000000000LL);
    cr_assert_str_eq(src, "cgroup memory.max");
    put("sys/fs/cgroup/pod/memory.max", "max\n");
    cr_assert_eq(sysres_memory_available(root, src, sizeof src), 60000000LL * 1024);
    cr_assert_str_eq(src, "MemAvailable");
}

Test(sysres, a_v1_memory_limit_counts_and_its_no_limit_value_does_not)
{
    put("proc/meminfo", "MemAvailable: 1000000 kB\n");
    put("proc/self/cgroup", "9:memory:/p\n");
    put("sys/fs/cgroup/memory/p/memory.limit_in_bytes", "9223372036854771712\n");
    put("sys/fs/cgroup/memory/p/memory.usage_in_bytes", "5000\n");
    cr_assert_eq(sysres_memory_available(root, NULL, 0), 1000000LL * 1024);
    put("sys/fs/cgroup/memory/p/memory.limit_in_bytes", "100000\n");
    char src[64];
    cr_assert_eq(sysres_memory_available(root, src, sizeof src), 95000);
    cr_assert_str_eq(src, "cgroup memory.limit_in_bytes");
}

Test(sysres, nothing_readable_means_unknown_memory)
{
    cr_assert_eq(sysres_memory_available(root, NULL, 0), -1);
}
