/* lib/sysres.c - see sysres.h. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "sysres.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NO_LIMIT LLONG_MAX

/* First line of root+path, without its newline. Returns 0 or -1. */
static int read_line(const char *root, const char *path, char *out, size_t outlen)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s%s", root, path) >= (int)sizeof p) return -1;
    FILE *f = fopen(p, "re");
    if (!f) return -1;
    int ok = fgets(out, (int)outlen, f) != NULL;
    fclose(f);
    if (!ok) return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

static int is_dir(const char *root, const char *path)
{
    char p[PATH_MAX];
    struct stat st;
    return snprintf(p, sizeof p, "%s%s", root, path) < (int)sizeof p && stat(p, &st) == 0 &&
           S_ISDIR(st.st_mode);
}

/* The cgroup directory of this process under mount (e.g.
 * "/sys/fs/cgroup" for v2, "/sys/fs/cgroup/cpu" for v1's cpu controller),
 * into dir. /proc/self/cgroup names it relative to the hierarchy's root;
 * in a container without a cgroup namespace that path does not exist in
 * the container's mount, whose root then is the container's own cgroup. */
static int cgroup_dir(const char *root, const char *mount, const char *controller, char *dir,
                      size_t dirlen)
{
    char p[PATH_MAX], line[1024];
    if (snprintf(p, sizeof p, "%s/proc/self/cgroup", root) >= (int)sizeof p) return -1;
    FILE *f = fopen(p, "re");
    if (!f) return -1;
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = '\0';
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        int match = 0;
        if (!controller) {
            match = strcmp(line, "0") == 0 && *ctrls == '\0'; /* v2: "0::/path" */
        } else {
            char list[256];
            snprintf(list, sizeof list, "%s", ctrls);
            for (char *save, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
                match |= strcmp(t, controller) == 0;
        }
        if (!match) continue;
        if (snprintf(dir, dirlen, "%s%s", mount, strcmp(path, "/") == 0 ? "" : path) <
                (int)dirlen &&
            is_dir(root, dir))
            found = 0;
        else if (snprintf(dir, dirlen, "%s", mount) < (int)dirlen && is_dir(root, dir))
            found = 0;
        break;
    }
    fclose(f);
    return found;
}

/* Parent of a cgroup directory, stopping at mount: 0, or -1 at the top. */
static int parent_dir(char *dir, const char *mount)
{
    if (strcmp(dir, mount) == 0) return -1;
    char *slash = strrchr(dir, '/');
    if (!slash || (size_t)(slash - dir) < strlen(mount)) return -1;
    *slash = '\0';
    return 0;
}

static long long read_ll(const char *root, const char *dir, const char *file)
{
    char p[PATH_MAX], line[128];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    if (read_line(root, p, line, sizeof line) != 0) return -1;
    if (strcmp(line, "max") == 0) return NO_LIMIT;
    char *end;
    long long v = strtoll(line, &end, 10);
    return end != line && v >= 0 ? v : -1;
}

/* The smallest quota/period over dir and its ancestors, in CPUs (may be
 * fractional); NO_LIMIT-ish (0 returned) when none. */
static double cgroup_cpus(const char *root, int *v2)
{
    char dir[PATH_MAX], line[128];
    double best = 0;
    if (cgroup_dir(root, "/sys/fs/cgroup", NULL, dir, sizeof dir) == 0) {
        *v2 = 1;
        do {
            char p[PATH_MAX + 16];
            snprintf(p, sizeof p, "%s/cpu.max", dir);
            long long q, per;
            char qs[64];
            if (read_line(root, p, line, sizeof line) == 0 &&
                sscanf(line, "%63s %lld", qs, &per) == 2 && strcmp(qs, "max") != 0 && per > 0 &&
                (q = strtoll(qs, NULL, 10)) > 0) {
                double c = (double)q / (double)per;
                if (best == 0 || c < best) best = c;
            }
        } while (parent_dir(dir, "/sys/fs/cgroup") == 0);
        if (best > 0) return best;
    }
    *v2 = 0;
    const char *mounts[] = {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"};
    for (int i = 0; i < 2; i++) {
        if (cgroup_dir(root, mounts[i], "cpu", dir, sizeof dir) != 0) continue;
        do {
            long long q = read_ll(root, dir, "cpu.cfs_quota_us"),
                      per = read_ll(root, dir, "cpu.cfs_period_us");
            if (q > 0 && per > 0) {
                double c = (double)q / (double)per;
                if (best == 0 || c < best) best = c;
            }
        } while (parent_dir(dir, mounts[i]) == 0);
        break;
    }
    return best;
}

int sysres_cpus(const char *root, int affinity_cpus, char *source, size_t srclen)
{
    const char *src = "affinity";
    int n = affinity_cpus;
    if (n <= 0) {
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof set, &set) == 0) {
            n = CPU_COUNT(&set);
        } else {
            long c = sysconf(_SC_NPROCESSORS_ONLN);
            n = c > 0 ? (int)c : 1;
            src = "online cpus";
        }
    }
    int v2 = 0;
    double quota = cgroup_cpus(root, &v2);
    if (quota > 0 && quota < n) {
        n = (int)quota; /* rounded down: 1.5 CPUs of quota keep one thread busy */
        src = v2 ? "cgroup cpu.max" : "cgroup cpu.cfs_quota_us";
    }
    if (n < 1) n = 1;
    if (source) snprintf(source, srclen, "%s", src);
    return n;
}

long long sysres_memory_available(const char *root, char *source, size_t srclen)
{
    long long best = -1;
    const char *src = "";
    char p[PATH_MAX], line[256];
    if (snprintf(p, sizeof p, "%s/proc/meminfo", root) < (int)sizeof p) {
        FILE *f = fopen(p, "re");
        if (f) {
            long long kb;
            while (fgets(line, sizeof line, f))
                if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) {
                    best = kb * 1024;
                    src = "MemAvailable";
                    break;
                }
            fclose(f);
        }
    }
    char dir[PATH_MAX];
    struct {
        const char *mount, *controller, *limit, *usage, *name;
    } kinds[] = {
        {"/sys/fs/cgroup", NULL, "memory.max", "memory.current", "cgroup memory.max"},
        {"/sys/fs/cgroup/memory", "memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
         "cgroup memory.limit_in_bytes"},
    };
    for (int k = 0; k < 2; k++) {
        if (cgroup_dir(root, kinds[k].mount, kinds[k].controller, dir, sizeof dir) != 0) continue;
        int any = 0;
        do {
            long long lim = read_ll(root, dir, kinds[k].limit);
            /* v1 writes "no limit" as a huge page-rounded number */
            if (lim < 0 || lim == NO_LIMIT || lim >= (1LL << 60)) continue;
            any = 1;
            long long use = read_ll(root, dir, kinds[k].usage);
            long long left = lim - (use > 0 && use != NO_LIMIT ? use : 0);
            if (left < 0) left = 0;
            if (best < 0 || left < best) {
                best = left;
                src = kinds[k].name;
            }
        } while (parent_dir(dir, kinds[k].mount) == 0);
        if (any || k == 0) break; /* v2 mounted: v1 paths are not this process's */
    }
    if (source) snprintf(source, srclen, "%s", src);
    return best;
}
