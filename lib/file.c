/* lib/file.c - see file.h. */
#define _GNU_SOURCE /* mkostemp */
#include "file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define TMP_PREFIX ".vitjob-tmp."

const char *file_reason(const char *msg, const char *path)
{
    size_t n = strlen(path);
    return strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ' ? msg + n + 2 : msg;
}

const char *file_kind(mode_t mode)
{
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "not a regular file";
}

/* What path was opened as (fd, opened O_NONBLOCK so that a FIFO cannot
 * block the open): fstat'ed into *st, it must be a regular file; then fd is
 * made blocking. Returns fd, or closes it and returns -1. */
static int keep_regular(int fd, const char *path, struct stat *st, char *err, size_t errlen)
{
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        err_printf(err, errlen, "%s: is %s, not a regular file", path, file_kind(st->st_mode));
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int file_open_regular(const char *path, off_t *size, char *err, size_t errlen)
{
    struct stat st;
    /* stat first, so that a device is never even opened (opening some has
     * effects); then fstat what was opened, so that a swap in between is
     * caught too */
    if (stat(path, &st) != 0) {
        err_printf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        err_printf(err, errlen, "%s: is %s, not a regular file", path, file_kind(st.st_mode));
        return -1;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        err_printf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (keep_regular(fd, path, &st, err, errlen) < 0) return -1;
    if (size) *size = st.st_size;
    return fd;
}

int file_read(buf *b, const char *path, char *err, size_t errlen)
{
    int fd = file_open_regular(path, NULL, err, errlen);
    if (fd < 0) return -1;
    char chunk[65536];
    int rc = 0;
    for (;;) {
        ssize_t got = read(fd, chunk, sizeof chunk);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            err_printf(err, errlen, "%s: read failed: %s", path, strerror(errno));
            rc = -1;
            break;
        }
        if (got == 0) break;
        if (buf_append(b, chunk, (size_t)got) != 0) {
            if (b->over_max)
                err_printf(err, errlen, "%s: larger than %zu bytes", path, b->max);
            else
                err_printf(err, errlen, "%s: out of memory reading it", path);
            rc = -1;
            break;
        }
    }
    close(fd);
    return rc;
}

int file_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* ---- paths ---- */

/* Splits path into its directory (dir, "." when none) and base name. */
static int split_path(const char *path, char *dir, size_t dirlen, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, dirlen, ".");
        *base = path;
        return 0;
    }
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= dirlen) return -1;
    memcpy(dir, path, n);
    dir[n] = '\0';
    *base = slash + 1;
    return 0;
}

/* The temporary-name prefix of a target: TMP_PREFIX + FNV-1a of its base. */
static void tmp_prefix(const char *base, char *out, size_t outlen)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)base; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    snprintf(out, outlen, TMP_PREFIX "%016llx.", (unsigned long long)h);
}

/* Checks what path names today: absent or a regular file. */
static int check_target(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISREG(st.st_mode)) return 0;
        if (S_ISLNK(st.st_mode))
            err_printf(err, errlen, "%s: is a symbolic link; name the file itself as the "
                       "output, which is replaced as a whole", path);
        else
            err_printf(err, errlen, "%s: is %s, not a regular file; an output must be a "
                       "regular file or absent", path, file_kind(st.st_mode));
        return -1;
    }
    if (errno == ENOENT) return 0;
    err_printf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
}

/* Creates a locked temporary for base in dir; returns its fd (name in tmp). */
static int create_tmp(const char *dir, const char *base, char *tmp, size_t tmplen)
{
    char prefix[64];
    tmp_prefix(base, prefix, sizeof prefix);
    for (int attempt = 0; attempt < 8; attempt++) {
        if (snprintf(tmp, tmplen, "%s/%sXXXXXX", dir, prefix) >= (int)tmplen) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0) return -1;
        if (flock(fd, LOCK_EX) != 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            errno = e;
            return -1;
        }
        /* a cleaner may have taken it for a dead writer's between
         * mkostemp and flock: then it is gone from the directory */
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(tmp, &b) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev) {
            fchmod(fd, 0644);
            return fd;
        }
        close(fd);
    }
    errno = EAGAIN;
    return -1;
}

/* Removes the temporaries of base in dir whose writers are gone. */
static int remove_stale(const char *dir, const char *base)
{
    char prefix[64];
    tmp_prefix(base, prefix, sizeof prefix);
    size_t plen = strlen(prefix);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, plen) != 0) continue;
        char p[PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p) continue;
        int fd = open(p, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            unlink(p) == 0)
            removed++;
        close(fd); /* drops the lock */
    }
    closedir(d);
    return removed;
}

int file_check_output(const char *path, int *removed, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    const char *base;
    if (removed) *removed = 0;
    size_t len = strlen(path);
    if (len == 0) {
        err_printf(err, errlen, "output path is empty");
        return -1;
    }
    if (len >= PATH_MAX || split_path(path, dir, sizeof dir, &base) != 0) {
        err_printf(err, errlen, "%.64s...: path is %zu bytes, longer than the %d a path may have",
                   path, len, PATH_MAX - 1);
        return -1;
    }
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        err_printf(err, errlen, "%s: names a directory; an output must name a file", path);
        return -1;
    }
    if (strlen(base) > NAME_MAX) {
        err_printf(err, errlen, "%s: file name is %zu bytes, longer than the %d a name may have",
                   path, strlen(base), NAME_MAX);
        return -1;
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT)
            err_printf(err, errlen, "%s: directory %s does not exist", path, dir);
        else if (errno == ENOTDIR)
            err_printf(err, errlen, "%s: a component of %s is not a directory", path, dir);
        else
            err_printf(err, errlen, "%s: directory %s: %s", path, dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        err_printf(err, errlen, "%s: %s is %s, not a directory", path, dir, file_kind(st.st_mode));
        return -1;
    }
    if (check_target(path, err, errlen) != 0) return -1;
    int n = remove_stale(dir, base);
    if (removed) *removed = n;
    char tmp[PATH_MAX + 64];
    int fd = create_tmp(dir, base, tmp, sizeof tmp);
    if (fd < 0) {
        err_printf(err, errlen, "%s: cannot create files in %s: %s", path, dir, strerror(errno));
        return -1;
    }
    unlink(tmp);
    close(fd);
    return 0;
}

int file_create(const char *path, char *err, size_t errlen)
{
    if (check_target(path, err, errlen) != 0) return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY |
                            O_CLOEXEC, 0644);
    if (fd < 0) {
        err_printf(err, errlen, "%s: cannot create: %s", path,
                   errno == ELOOP ? "is a symbolic link" : strerror(errno));
        return -1;
    }
    struct stat st;
    return keep_regular(fd, path, &st, err, errlen);
}

/* ---- atomic replacement ---- */

struct file_atomic {
    int fd;
    char *path, *tmp, *dir;
};

int file_atomic_begin(file_atomic **out, const char *path, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    const char *base;
    *out = NULL;
    if (strlen(path) >= PATH_MAX || split_path(path, dir, sizeof dir, &base) != 0 || !*base) {
        err_printf(err, errlen, "%s: not a file path that can be written", path);
        return -1;
    }
    if (check_target(path, err, errlen) != 0) return -1;
    file_atomic *a = calloc(1, sizeof *a);
    char tmp[PATH_MAX + 64];
    if (!a || !(a->path = strdup(path)) || !(a->dir = strdup(dir))) {
        err_printf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    a->fd = create_tmp(dir, base, tmp, sizeof tmp);
    if (a->fd < 0) {
        err_printf(err, errlen, "%s: cannot create a temporary file in %s: %s", path, dir,
                   strerror(errno));
        goto fail;
    }
    if (!(a->tmp = strdup(tmp))) {
        err_printf(err, errlen, "%s: out of memory", path);
        close(a->fd);
        unlink(tmp);
        goto fail;
    }
    *out = a;
    return 0;
fail:
    if (a) {
        free(a->path);
        free(a->dir);
        free(a);
    }
    return -1;
}

int file_atomic_fd(const file_atomic *a) { return a->fd; }

static void atomic_free(file_atomic *a)
{
    free(a->path);
    free(a->tmp);
    free(a->dir);
    free(a);
}

void file_atomic_abort(file_atomic *a)
{
    if (!a) return;
    unlink(a->tmp);
    close(a->fd);
    atomic_free(a);
}

int file_atomic_commit(file_atomic *a, char *err, size_t errlen)
{
    int rc = -1;
    if (fsync(a->fd) != 0) {
        err_printf(err, errlen, "%s: write failed: %s", a->path, strerror(errno));
        goto out;
    }
    /* what the path names may have changed since begin: still only a
     * regular file or nothing is replaced */
    if (check_target(a->path, err, errlen) != 0) goto out;
    if (rename(a->tmp, a->path) != 0) {
        err_printf(err, errlen, "%s: cannot rename %s over it: %s", a->path, a->tmp,
                   strerror(errno));
        goto out;
    }
    int dfd = open(a->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        /* some file systems cannot fsync a directory (EINVAL): the rename
         * is then as durable as they make it */
        if (fsync(dfd) != 0 && errno != EINVAL && errno != EROFS) {
            err_printf(err, errlen, "%s: fsync of directory %s failed: %s", a->path, a->dir,
                       strerror(errno));
            close(dfd);
            close(a->fd);
            atomic_free(a);
            return -1;
        }
        close(dfd);
    }
    close(a->fd);
    atomic_free(a);
    return 0;
out:
    file_atomic_abort(a);
    return rc;
}
