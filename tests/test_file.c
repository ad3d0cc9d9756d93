/* tests/test_file.c - lib/file.c: inputs that are not regular files are
 * refused without blocking, output paths are checked before any work, and
 * atomic replacement never touches anything but a regular file and leaves
 * no temporaries that outlive their writer. */
#include "file.h"

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_file_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", dir, dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(file, .init = make_dir, .fini = remove_dir, .timeout = 30);

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

static char *in_dir(const char *name)
{
    static char p[4][PATH_MAX];
    static int next;
    char *out = p[next++ % 4];
    snprintf(out, PATH_MAX, "%s/%s", dir, name);
    return out;
}

/* Names in dir that start with the temporary prefix. */
static int count_temporaries(void)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, ".vitjob-tmp.", 12) == 0;
    closedir(d);
    return n;
}

Test(file, read_appends_the_whole_file_and_bounds_it_by_max)
{
    char *p = in_dir("big");
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 100000; i++) fputc('a' + i % 26, f);
    fclose(f);
    char err[512];
    buf b = {0};
    cr_assert_eq(file_read(&b, p, err, sizeof err), 0, "%s", err);
    cr_assert_eq(b.len, 100000);
    cr_assert_eq(b.data[26], 'a');
    buf_free(&b);
    buf small = {.max = 1000};
    cr_assert_eq(file_read(&small, p, err, sizeof err), -1);
    cr_assert(strstr(err, "larger than 1000 bytes") && strstr(err, p), "%s", err);
    buf_free(&small);
    cr_assert_eq(file_read(&b, in_dir("absent"), err, sizeof err), -1);
    cr_assert(strstr(err, "No such file or directory"), "%s", err);
    buf_free(&b);
}

Test(file, a_fifo_given_as_an_input_is_refused_at_once_not_read)
{
    char *p = in_dir("fifo");
    cr_assert_eq(mkfifo(p, 0600), 0);
    char err[512];
    buf b = {0};
    /* with no writer, a blocking open or read would hang here until the
     * suite's timeout fails the test */
    cr_assert_eq(file_read(&b, p, err, sizeof err), -1);
    cr_assert(strstr(err, "is a FIFO, not a regular file"), "%s", err);
    cr_assert_eq(file_open_regular(p, NULL, err, sizeof err), -1);
    buf_free(&b);
}

Test(file, a_directory_or_device_given_as_an_input_is_refused_naming_what_it_is)
{
    char err[512];
    off_t size = -1;
    cr_assert_eq(file_open_regular(dir, &size, err, sizeof err), -1);
    cr_assert(strstr(err, "is a directory, not a regular file"), "%s", err);
    cr_assert_eq(size, -1, "no size is reported for what was refused");
    cr_assert_eq(file_open_regular("/dev/null", NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "/dev/null: is a character device"), "%s", err);
    write_text(in_dir("f"), "abc");
    int fd = file_open_regular(in_dir("f"), &size, err, sizeof err);
    cr_assert_geq(fd, 0, "%s", err);
    cr_assert_eq(size, 3);
    cr_assert_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0, "reads of a regular file block as usual");
    close(fd);
}

/* Each way an output path can be unusable, refused with what is wrong. */
Test(file, an_unusable_output_path_is_refused_before_any_work_naming_why)
{
    char err[512], *p;
    write_text(in_dir("plain"), "x");
    cr_assert_eq(mkdir(in_dir("sub"), 0755), 0);
    cr_assert_eq(mkfifo(in_dir("fifo"), 0600), 0);
    cr_assert_eq(symlink("plain", in_dir("link")), 0);
    const struct {
        const char *name, *want;
    } cases[] = {
        {"nodir/out.safetensors", "directory"},   /* ... does not exist */
        {"sub", "is a directory, not a regular file"},
        {"sub/", "names a directory"},
        {"plain/out", "is a regular file, not a directory"},
        {"fifo", "is a FIFO, not a regular file"},
        {"link", "is a symbolic link"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        p = in_dir(cases[i].name);
        err[0] = '\0';
        cr_assert_eq(file_check_output(p, NULL, err, sizeof err), -1, "%s accepted", p);
        cr_assert(strstr(err, cases[i].want), "%s: got \"%s\"", cases[i].name, err);
    }
    cr_assert_eq(file_check_output(in_dir("nodir/x"), NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "does not exist"), "%s", err);
    cr_assert_eq(file_check_output("/dev/null", NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "is a character device"), "%s", err);
    cr_assert_eq(file_check_output("", NULL, err, sizeof err), -1);
    char longname[NAME_MAX + 10];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    cr_assert_eq(file_check_output(in_dir(longname), NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "longer than the 255"), "%s", err);
    char longpath[PATH_MAX + 8];
    memset(longpath, 'p', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    cr_assert_eq(file_check_output(longpath, NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "longer than the 4095 a path may have"), "%s", err);
    /* usable: absent, or a regular file */
    cr_assert_eq(file_check_output(in_dir("new.bin"), NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(file_check_output(in_dir("plain"), NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(count_temporaries(), 0, "the probe leaves nothing behind");
}

Test(file, an_output_in_a_directory_that_takes_no_files_is_refused)
{
    char err[512];
    cr_assert_eq(mkdir(in_dir("ro"), 0555), 0);
    cr_assert_eq(chmod(dir, 0755), 0);
    if (geteuid() == 0) {
        /* root writes through permissions; a read-only file system is what
         * stops it, and needs a mount. Drop to nobody in a child. */
        pid_t pid = fork();
        if (pid == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
            _exit(file_check_output(in_dir("ro/out"), NULL, err, sizeof err) == -1 &&
                          strstr(err, "cannot create files in") && strstr(err, "Permission denied")
                      ? 0
                      : 1);
        }
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
        return;
    }
    cr_assert_eq(file_check_output(in_dir("ro/out"), NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot create files in"), "%s", err);
}

static void write_atomically(const char *path, const char *text)
{
    char err[512];
    file_atomic *a;
    cr_assert_eq(file_atomic_begin(&a, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(file_write_all(file_atomic_fd(a), text, strlen(text)), 0);
    cr_assert_eq(file_atomic_commit(a, err, sizeof err), 0, "%s", err);
}

static void assert_contents(const char *path, const char *want)
{
    char err[512];
    buf b = {0};
    cr_assert_eq(file_read(&b, path, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(b.data ? b.data : "", want, "%s", path);
    buf_free(&b);
}

Test(file, atomic_replacement_swaps_the_file_whole_so_other_links_keep_the_old_bytes)
{
    char *p = in_dir("out"), *other = in_dir("other-link");
    write_text(p, "old");
    cr_assert_eq(link(p, other), 0);
    write_atomically(p, "new contents");
    assert_contents(p, "new contents");
    /* written in place, the other name would see the new bytes too */
    assert_contents(other, "old");
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0644);
    cr_assert_eq(count_temporaries(), 0);
}

Test(file, atomic_replacement_refuses_devices_fifos_and_directories)
{
    char err[512];
    file_atomic *a = NULL;
    cr_assert_eq(mkfifo(in_dir("fifo"), 0600), 0);
    cr_assert_eq(file_atomic_begin(&a, in_dir("fifo"), err, sizeof err), -1);
    cr_assert(strstr(err, "is a FIFO"), "%s", err);
    cr_assert_null(a);
    cr_assert_eq(file_atomic_begin(&a, "/dev/null", err, sizeof err), -1);
    cr_assert(strstr(err, "is a character device"), "%s", err);
    struct stat st;
    cr_assert_eq(stat("/dev/null", &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "/dev/null is still a device");
    cr_assert_eq(file_atomic_begin(&a, dir, err, sizeof err), -1);
    /* and what changed between begin and commit is not replaced either */
    char *p = in_dir("swapped");
    cr_assert_eq(file_atomic_begin(&a, p, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mkfifo(p, 0600), 0);
    cr_assert_eq(file_atomic_commit(a, err, sizeof err), -1);
    cr_assert(strstr(err, "is a FIFO"), "%s", err);
    cr_assert_eq(lstat(p, &st), 0);
    cr_assert(S_ISFIFO(st.st_mode));
    cr_assert_eq(count_temporaries(), 0, "a refused commit removes its temporary");
}

Test(file, a_temporary_whose_writer_died_is_removed_by_the_next_check_and_a_live_one_is_kept)
{
    char err[512], *p = in_dir("model.safetensors");
    /* a writer killed mid-write: its temporary stays, unlocked */
    pid_t pid = fork();
    if (pid == 0) {
        file_atomic *a;
        if (file_atomic_begin(&a, p, err, sizeof err) != 0) _exit(1);
        (void)!write(file_atomic_fd(a), "partial", 7);
        _exit(0); /* no commit, no abort: as if killed */
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cr_assert_eq(count_temporaries(), 1);
    /* a live writer of the same target, holding its lock */
    file_atomic *live;
    cr_assert_eq(file_atomic_begin(&live, p, err, sizeof err), 0, "%s", err);
    cr_assert_eq(count_temporaries(), 2);
    /* a temporary of another target is not this check's */
    file_atomic *other;
    cr_assert_eq(file_atomic_begin(&other, in_dir("metrics.jsonl"), err, sizeof err), 0);
    int removed = -1;
    cr_assert_eq(file_check_output(p, &removed, err, sizeof err), 0, "%s", err);
    cr_assert_eq(removed, 1, "only the dead writer's temporary goes");
    cr_assert_eq(count_temporaries(), 2);
    cr_assert_eq(file_write_all(file_atomic_fd(live), "done", 4), 0);
    cr_assert_eq(file_atomic_commit(live, err, sizeof err), 0, "%s", err);
    assert_contents(p, "done");
    file_atomic_abort(other);
    cr_assert_eq(count_temporaries(), 0);
}

Test(file, a_stream_output_is_created_as_a_regular_file_and_nothing_else_is_opened)
{
    char err[512], *p = in_dir("metrics.jsonl");
    int fd = file_create(p, err, sizeof err);
    cr_assert_geq(fd, 0, "%s", err);
    cr_assert_eq(file_write_all(fd, "a\n", 2), 0);
    close(fd);
    fd = file_create(p, err, sizeof err);
    cr_assert_geq(fd, 0, "%s", err);
    close(fd);
    assert_contents(p, "");
    cr_assert_eq(mkfifo(in_dir("fifo"), 0600), 0);
    cr_assert_eq(file_create(in_dir("fifo"), err, sizeof err), -1);
    cr_assert(strstr(err, "is a FIFO"), "%s", err);
    cr_assert_eq(file_create("/dev/null", err, sizeof err), -1);
    cr_assert_eq(symlink("metrics.jsonl", in_dir("link")), 0);
    cr_assert_eq(file_create(in_dir("link"), err, sizeof err), -1);
    cr_assert(strstr(err, "symbolic link"), "%s", err);
}

Test(file, a_reason_drops_only_the_leading_path_its_message_names)
{
    cr_assert_str_eq(file_reason("/a/b: is a FIFO, not a regular file", "/a/b"),
                     "is a FIFO, not a regular file");
    cr_assert_str_eq(file_reason("/a/bc: No such file", "/a/b"), "/a/bc: No such file");
    cr_assert_str_eq(file_reason("/a/bc rest", "/a/b"), "/a/bc rest");
    cr_assert_str_eq(file_reason("larger than 5 bytes", "/a/b"), "larger than 5 bytes");
}
