/* lib/sysres.h - what the machine lets this process use: CPUs and memory.
 *
 * Owns: reading the CPU affinity mask, the cgroup's CPU quota (v2 cpu.max,
 * v1 cpu.cfs_quota_us / cpu.cfs_period_us) and memory limit (v2
 * memory.max - memory.current, v1 memory.limit_in_bytes -
 * memory.usage_in_bytes) on this cgroup and every ancestor, and
 * /proc/meminfo's MemAvailable. A pod limited to 2 CPUs on a 64-core node
 * gets 2, not 64.
 * Must not: set anything (callers size their thread pools), or log.
 *
 * root: the directory the /proc and /sys paths are read under: "" for the
 * real ones; tests pass a directory holding fake proc/ and sys/ trees.
 */
#ifndef VITJOB_SYSRES_H
#define VITJOB_SYSRES_H

#include <stddef.h>

/* CPUs this process may keep busy: the smallest of the affinity mask's
 * count (affinity_cpus; <= 0 to read this process's own) and each cgroup
 * quota on the way to the root (quota / period, rounded down), at least 1.
 * source gets what decided it: "affinity", "cgroup cpu.max",
 * "cgroup cpu.cfs_quota_us" or "online cpus". */
int sysres_cpus(const char *root, int affinity_cpus, char *source, size_t srclen);

/* Bytes of memory this process can still take: the smallest of
 * MemAvailable and, for this cgroup and each ancestor with a limit, limit
 * minus usage. -1 when nothing can be read. source as above:
 * "MemAvailable", "cgroup memory.max" or "cgroup memory.limit_in_bytes". */
long long sysres_memory_available(const char *root, char *source, size_t srclen);

#endif
