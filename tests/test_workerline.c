/* tests/test_workerline.c - operator/workerline.c: the worker's own error
 * read from a pod's termination message: the msg value of its last line
 * (the file the worker writes, or the log tail under FallbackToLogsOnError
 * that ends with that line), read back from logfmt; a message without it
 * gives its last line; nothing a container wrote can put a control
 * character or half a character into the condition. */
#include "workerline.h"

#include <criterion/criterion.h>

#include <string.h>

static const char *error_of(const char *msg)
{
    static char out[VJ_WORKER_ERROR_MAX];
    vj_worker_error(msg, out, sizeof out);
    return out;
}

Test(workerline, the_msg_of_the_workers_last_line_is_read_back_from_logfmt)
{
    cr_assert_str_eq(error_of("ts=2024-01-01T00:00:00.000Z level=error comp=worker exit_code=3 "
                              "class=data retried=no msg=\"/data/fashion-mnst/train-images-idx3-ubyte: "
                              "cannot open dataset file\""),
                     "/data/fashion-mnst/train-images-idx3-ubyte: cannot open dataset file");
    cr_assert_str_eq(error_of("ts=x level=error comp=worker exit_code=2 class=config msg=bare"), "bare");
    cr_assert_str_eq(error_of("exit_code=3 msg=\"say \\\"hi\\\" \\\\ \\u00e9t\\u00e9\""),
                     "say \"hi\" \\ \xc3\xa9t\xc3\xa9");
}

Test(workerline, in_a_log_tail_the_last_line_with_exit_code_wins_over_lines_after_it)
{
    const char *tail = "ts=a level=info comp=train step=1\n"
                       "ts=b level=error comp=worker exit_code=1 class=io msg=\"first\"\n"
                       "ts=c level=error comp=agent exit_code=3 class=local_rank msg=\"second\"\n"
                       "ts=d level=info comp=x a=1\n";
    cr_assert_str_eq(error_of(tail), "second");
}

Test(workerline, a_key_inside_a_quoted_value_is_not_a_key)
{
    cr_assert_str_eq(error_of("exit_code=1 detail=\"x msg=forged\" msg=real"), "real");
}

Test(workerline, without_the_workers_line_the_last_line_that_is_not_blank)
{
    cr_assert_str_eq(error_of("starting\nSegmentation fault (core dumped)  \n\n  \n"),
                     "Segmentation fault (core dumped)");
    cr_assert_str_eq(error_of("exit_code=137 class=stopped"), "exit_code=137 class=stopped");
    char out[16] = "unchanged";
    cr_assert_eq(vj_worker_error(NULL, out, sizeof out), 0);
    cr_assert_str_eq(out, "");
    cr_assert_eq(vj_worker_error(" \n\t\n", out, sizeof out), 0);
}

Test(workerline, control_characters_become_spaces_and_a_cut_keeps_whole_characters)
{
    cr_assert_str_eq(error_of("exit_code=3 msg=\"a\\nb\\tc\\u001bd\""), "a b c d");
    cr_assert_str_eq(error_of("plain\x1b[31mred"), "plain [31mred");
    char out[6];
    vj_worker_error("exit_code=3 msg=\"abcd\\u00e9\"", out, sizeof out);
    cr_assert_str_eq(out, "abcd", "no half of the e-acute: %s", out);
    vj_worker_error("abcd\xc3\xa9", out, sizeof out);
    cr_assert_str_eq(out, "abcd", "no half of the e-acute: %s", out);
}
