/* tests/test_log.c - lib/log.c: one event is one line of printable text,
 * whatever its values hold. */
#include "log.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *escaped(const char *in)
{
    static char out[256];
    log_escape(out, sizeof out, in);
    return out;
}

Test(log, control_characters_in_values_are_escaped_and_printable_text_is_kept)
{
    cr_assert_str_eq(escaped("a\nts=x level=error msg=forged"), "a\\nts=x level=error msg=forged");
    cr_assert_str_eq(escaped("\r\t"), "\\r\\t");
    cr_assert_str_eq(escaped("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
    cr_assert_str_eq(escaped("del\x7f bell\a"), "del\\x7f bell\\x07");
    /* UTF-8 text stays; C1 controls (U+009B is CSI on some terminals), lone
     * 8-bit bytes, overlong forms and surrogates do not */
    cr_assert_str_eq(escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
                     "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    cr_assert_str_eq(escaped("\xc2\x9b" "2J"), "\\xc2\\x9b2J");
    cr_assert_str_eq(escaped("\x9b" "2J"), "\\x9b2J");
    cr_assert_str_eq(escaped("\xc0\xaf \xed\xa0\x80"), "\\xc0\\xaf \\xed\\xa0\\x80");
    cr_assert_str_eq(escaped("\xe2\x82"), "\\xe2\\x82", "a cut sequence");
}

Test(log, escaping_stops_at_a_whole_escape_when_the_buffer_is_full)
{
    char out[6];
    cr_assert_eq(log_escape(out, sizeof out, "ab\n\ncd"), 4);
    cr_assert_str_eq(out, "ab\\n");
    cr_assert_eq(log_escape(out, sizeof out, "ab\x01"), 2);
    cr_assert_str_eq(out, "ab", "no half of \\x01");
}

Test(log, a_value_with_a_newline_and_an_escape_sequence_is_logged_as_one_line)
{
    char path[] = "/tmp/test_log_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    LOG_INFO("test", "event=exported path=%s", "/x\nts=0 level=error comp=worker msg=\"forged\"\x1b]0;t\a");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[2048] = "";
    cr_assert_geq(pread(fd, text, sizeof text - 1, 0), 0);
    close(fd);
    unlink(path);
    char *nl = strchr(text, '\n');
    cr_assert_not_null(nl);
    cr_assert_eq(nl[1], '\0', "one line: %s", text);
    cr_assert_null(strchr(text, '\x1b'));
    cr_assert_null(strchr(text, '\a'));
    cr_assert(strstr(text, "path=/x\\nts=0 level=error"), "%s", text);
    cr_assert(strstr(text, "\\x1b]0;t\\x07\n"), "%s", text);
}
