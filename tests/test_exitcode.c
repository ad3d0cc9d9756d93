/* tests/test_exitcode.c - api/exitcode.c: the table of error classes is
 * complete, uses only the contract's exit codes, agrees with the
 * operator's notion of permanent, and is the one docs/design.md prints. */
#include "exitcode.h"

#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "file.h"

Test(exitcode, every_class_has_exactly_one_row_in_enum_order_with_a_unique_name)
{
    size_t n;
    const vj_err_row *t = vj_err_table(&n);
    cr_assert_eq(n, (size_t)(VJ_ERR_END - VJ_ERR_USAGE));
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(t[i].err, VJ_ERR_USAGE + (int)i, "row %zu out of order", i);
        cr_assert_eq(vj_err_info(t[i].err), &t[i]);
        cr_assert(t[i].name && *t[i].name && t[i].meaning && *t[i].meaning);
        for (size_t j = 0; j < i; j++) cr_assert_str_neq(t[i].name, t[j].name);
    }
    cr_assert_null(vj_err_info(VJ_OK));
    cr_assert_null(vj_err_info(VJ_ERR_END));
}

Test(exitcode, codes_are_the_contracts_and_permanent_means_what_the_operator_does)
{
    size_t n;
    const vj_err_row *t = vj_err_table(&n);
    for (size_t i = 0; i < n; i++) {
        int c = t[i].exit_code;
        cr_assert(c == VITJOB_EXIT_FAILURE || c == VITJOB_EXIT_CONFIG || c == VITJOB_EXIT_DATA ||
                      c == 128 + SIGTERM,
                  "%s: %d is not a code of api/contract.h", t[i].name, c);
        cr_assert_eq(t[i].permanent, vj_exit_permanent(c), "%s", t[i].name);
        cr_assert_eq(vj_exit_code(t[i].err, SIGTERM), c, "%s", t[i].name);
    }
    cr_assert(!vj_exit_permanent(0) && !vj_exit_permanent(1) && !vj_exit_permanent(137));
    cr_assert(!vj_exit_permanent(143) && !vj_exit_permanent(130));
}

Test(exitcode, a_stop_exits_128_plus_its_signal)
{
    cr_assert_eq(vj_exit_code(VJ_ERR_STOPPED, SIGTERM), 143);
    cr_assert_eq(vj_exit_code(VJ_ERR_STOPPED, SIGINT), 130);
    cr_assert_eq(vj_exit_code(VJ_ERR_STOPPED, 0), 143, "no signal recorded: as SIGTERM");
    cr_assert_eq(vj_exit_code(VJ_OK, SIGTERM), 0, "a run that finished exits 0");
}

Test(exitcode, an_exit_code_returned_where_a_class_belongs_is_not_taken_for_one)
{
    /* a function that still returned VITJOB_EXIT_CONFIG (2) would exit 1:
     * retried, and caught by the worker's tests of permanent errors */
    cr_assert_eq(vj_exit_code((vj_err)VITJOB_EXIT_CONFIG, 0), VITJOB_EXIT_FAILURE);
    cr_assert_eq(vj_exit_code((vj_err)VITJOB_EXIT_DATA, 0), VITJOB_EXIT_FAILURE);
    cr_assert_gt(VJ_ERR_USAGE, 255, "classes cannot be mistaken for exit codes");
}

Test(exitcode, docs_design_prints_the_same_table)
{
    buf doc = {0};
    char err[512];
    cr_assert_eq(file_read(&doc, "docs/design.md", err, sizeof err), 0, "%s (run from the root)",
                 err);
    size_t n;
    const vj_err_row *t = vj_err_table(&n);
    for (size_t i = 0; i < n; i++) {
        char row[128];
        snprintf(row, sizeof row, "| `%s` | %d | %s |", t[i].name, t[i].exit_code,
                 t[i].permanent ? "no" : "yes");
        cr_assert_not_null(strstr(doc.data, row), "docs/design.md lacks the row \"%s\"", row);
    }
    buf_free(&doc);
}
