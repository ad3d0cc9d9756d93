/* tests/test_termmsg.c - lib/termmsg.c and log_final: a program's last
 * line is also its termination message, in the file the environment names
 * (the pod's terminationMessagePath), at most the 4096 bytes the kubelet
 * keeps, cut at a whole character; with no file named and no writable
 * /dev/termination-log, nothing is written anywhere. */
#include "log.h"
#include "termmsg.h"

#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/test_termmsg_XXXXXX";
static char file[sizeof dir + 16];

static void setup(void)
{
    cr_assert_not_null(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/msg", dir);
}

static void teardown(void)
{
    unlink(file);
    rmdir(dir);
}

/* The file's content (static), "" when missing. */
static const char *content(size_t *len)
{
    static char text[8192];
    size_t n = 0;
    FILE *f = fopen(file, "rb");
    if (f) {
        n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
    }
    text[n] = '\0';
    if (len)
        *len = n;
    return text;
}

TestSuite(termmsg, .init = setup, .fini = teardown);

Test(termmsg, log_final_logs_its_line_and_writes_it_as_the_termination_message)
{
    cr_assert_str_eq(termmsg_init(file), file);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    log_final("worker", "exit_code=%d class=%s msg=%s", 3, "data",
              LOGV("/data/fashion-mnst/train-images-idx3-ubyte: cannot open dataset file"));
    fflush(stderr);
    dup2(saved, 2);
    close(null);
    close(saved);
    const char *t = content(NULL);
    cr_assert(strstr(t, " level=error comp=worker exit_code=3 class=data msg=\"/data/fashion-mnst/"
                        "train-images-idx3-ubyte: cannot open dataset file\"") != NULL, "%s", t);
    cr_assert_eq(strchr(t, '\n'), NULL, "one line, without its newline: %s", t);
}

Test(termmsg, a_second_message_replaces_the_first)
{
    termmsg_init(file);
    cr_assert_eq(termmsg_write("first, longer message", 21), 0);
    cr_assert_eq(termmsg_write("second", 6), 0);
    cr_assert_str_eq(content(NULL), "second");
}

Test(termmsg, a_message_is_cut_to_4096_bytes_at_a_whole_character)
{
    char big[5000];
    memset(big, 'a', sizeof big);
    big[4095] = '\xc3'; /* an e-acute across bytes 4095 and 4096: cut in two at 4096 */
    big[4096] = '\xa9';
    termmsg_init(file);
    cr_assert_eq(termmsg_write(big, sizeof big), 0);
    size_t n;
    content(&n);
    cr_assert_eq(n, 4095, "the whole character dropped, not half of it: %zu bytes", n);
    big[4095] = big[4096] = 'a';
    cr_assert_eq(termmsg_write(big, sizeof big), 0);
    content(&n);
    cr_assert_eq(n, TERMMSG_MAX);
}

Test(termmsg, without_a_named_file_or_a_writable_default_nothing_is_written)
{
    if (access(TERMMSG_DEFAULT_PATH, W_OK) == 0)
        cr_skip_test("%s exists here (inside a pod)", TERMMSG_DEFAULT_PATH);
    cr_assert_null(termmsg_init(NULL));
    cr_assert_null(termmsg_init(""));
    cr_assert_eq(termmsg_write("lost", 4), -1);
    cr_assert_eq(access(file, F_OK), -1, "no file made");
}
