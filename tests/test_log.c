/* tests/test_log.c - lib/log.c: one event is one logfmt line, whatever its
 * values hold: log_value quotes and escapes a value as go-logfmt does, so
 * that a value can neither end its quotes and forge a key nor forge a line,
 * and log_line's last guard escapes what a caller forgot to quote. (The
 * parse-back by go-logfmt itself is in tests/worker.bats.) */
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

static const char *quoted(const char *in)
{
    static char out[256];
    return log_value(out, sizeof out, in);
}

/* Runs fn with stderr sent to a file; returns what it wrote (static). */
static const char *stderr_of(void (*fn)(void))
{
    static char text[8192];
    char path[] = "/tmp/test_log_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    memset(text, 0, sizeof text);
    cr_assert_geq(pread(fd, text, sizeof text - 1, 0), 0);
    close(fd);
    unlink(path);
    return text;
}

Test(log, a_value_that_needs_no_quotes_is_written_bare)
{
    cr_assert_str_eq(quoted("abc"), "abc");
    cr_assert_str_eq(quoted("/tmp/x-1.y_z:8080"), "/tmp/x-1.y_z:8080");
    cr_assert_str_eq(quoted("a\\b"), "a\\b", "a backslash alone needs no quotes (go-logfmt)");
    cr_assert_str_eq(quoted("caf\xc3\xa9"), "caf\xc3\xa9");
}

Test(log, quotes_backslashes_equals_and_spaces_are_quoted_and_escaped)
{
    cr_assert_str_eq(quoted("a b"), "\"a b\"");
    cr_assert_str_eq(quoted("a=b"), "\"a=b\"");
    cr_assert_str_eq(quoted("say \"hi\""), "\"say \\\"hi\\\"\"");
    cr_assert_str_eq(quoted("a\"b"), "\"a\\\"b\"");
    cr_assert_str_eq(quoted("C:\\x y"), "\"C:\\\\x y\"");
    cr_assert_str_eq(quoted("\\\""), "\"\\\\\\\"\"", "a backslash then a quote");
}

Test(log, an_empty_value_is_two_quotes)
{
    cr_assert_str_eq(quoted(""), "\"\"");
}

Test(log, newlines_tabs_and_control_characters_are_escaped_as_logfmt_reads_them)
{
    cr_assert_str_eq(quoted("a\nb"), "\"a\\nb\"");
    cr_assert_str_eq(quoted("a\tb\r"), "\"a\\tb\\r\"");
    cr_assert_str_eq(quoted("\x1b[31mred"), "\"\\u001b[31mred\"");
    cr_assert_str_eq(quoted("bell\a"), "\"bell\\u0007\"");
    cr_assert_str_eq(quoted("del\x7f"), "\"del\\u007f\"", "DEL, as a C0 control");
    cr_assert_str_eq(quoted("\xc2\x9b" "2J"), "\"\\u009b2J\"", "U+009B (CSI), a C1 control");
}

Test(log, bytes_that_are_not_utf8_become_ufffd)
{
    cr_assert_str_eq(quoted("\xff"), "\"\\ufffd\"");
    cr_assert_str_eq(quoted("a\x9b" "2J"), "\"a\\ufffd2J\"", "a lone continuation byte");
    cr_assert_str_eq(quoted("\xc0\xaf"), "\"\\ufffd\\ufffd\"", "an overlong form");
    cr_assert_str_eq(quoted("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"", "a surrogate");
    cr_assert_str_eq(quoted("\xe2\x82"), "\"\\ufffd\\ufffd\"", "a cut sequence");
    cr_assert_str_eq(quoted("\xe2\x82\xac \xf0\x9f\x98\x80"), "\"\xe2\x82\xac \xf0\x9f\x98\x80\"",
                     "valid UTF-8 stays");
    cr_assert_str_eq(quoted("\xef\xbf\xbd"), "\"\xef\xbf\xbd\"", "U+FFFD itself is quoted");
}

Test(log, a_value_cut_to_its_buffer_keeps_whole_escapes_and_its_closing_quote)
{
    char out[8];
    cr_assert_str_eq(log_value(out, sizeof out, "ab\"cdef"), "\"ab\\\"c\"");
    cr_assert_str_eq(log_value(out, sizeof out, "abc\ndef"), "\"abc\\n\"");
    cr_assert_str_eq(log_value(out, sizeof out, "abcd\nef"), "\"abcd\"", "no half of \\n");
    cr_assert_str_eq(log_value(out, sizeof out, "a\x01"), "\"a\"", "no half of \\u0001");
    cr_assert_str_eq(log_value(out, sizeof out, "abcdefghij"), "abcdefg", "a bare value is cut");
    char tiny[2];
    cr_assert_str_eq(log_value(tiny, sizeof tiny, "a b"), "", "no room for two quotes");
}

Test(log, logv_formats_text_around_a_value_then_quotes_it)
{
    cr_assert_str_eq(LOGVF("cannot open '%s': %s", "a\"b", "gone"),
                     "\"cannot open 'a\\\"b': gone\"");
    cr_assert_str_eq(LOGV("plain"), "plain");
}

static void log_forging_path(void)
{
    LOG_INFO("test", "event=exported path=%s step=%d", LOGV("/data/x\" forged=\"1"), 3);
}

Test(log, a_quote_in_a_value_cannot_end_it_and_forge_a_key)
{
    const char *text = stderr_of(log_forging_path);
    cr_assert(strstr(text, " comp=test event=exported path=\"/data/x\\\" forged=\\\"1\" step=3\n"),
              "%s", text);
}

Test(log, control_characters_a_caller_forgot_to_quote_are_escaped_on_the_line)
{
    cr_assert_str_eq(escaped("a\nts=x level=error msg=forged"), "a\\nts=x level=error msg=forged");
    cr_assert_str_eq(escaped("\r\t"), "\\r\\t");
    cr_assert_str_eq(escaped("\x1b[31mred\x1b[0m"), "\\u001b[31mred\\u001b[0m");
    cr_assert_str_eq(escaped("del\x7f bell\a"), "del\\u007f bell\\u0007");
    cr_assert_str_eq(escaped("k=\"a\\b\""), "k=\"a\\b\"",
                     "quotes and backslashes are the caller's");
    /* UTF-8 text stays; C1 controls (U+009B is CSI on some terminals), lone
     * 8-bit bytes, overlong forms and surrogates do not */
    cr_assert_str_eq(escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
                     "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    cr_assert_str_eq(escaped("\xc2\x9b" "2J"), "\\u009b2J");
    cr_assert_str_eq(escaped("\x9b" "2J"), "\\ufffd2J");
    cr_assert_str_eq(escaped("\xc0\xaf \xed\xa0\x80"), "\\ufffd\\ufffd \\ufffd\\ufffd\\ufffd");
    cr_assert_str_eq(escaped("\xe2\x82"), "\\ufffd\\ufffd", "a cut sequence");
}

Test(log, escaping_stops_at_a_whole_escape_when_the_buffer_is_full)
{
    char out[6];
    cr_assert_eq(log_escape(out, sizeof out, "ab\n\ncd"), 4);
    cr_assert_str_eq(out, "ab\\n");
    cr_assert_eq(log_escape(out, sizeof out, "ab\x01"), 2);
    cr_assert_str_eq(out, "ab", "no half of \\u0001");
}

static void log_unquoted_newline(void)
{
    LOG_INFO("test", "event=exported path=%s",
             "/x\nts=0 level=error comp=worker msg=\"forged\"\x1b]0;t\a");
}

Test(log, a_value_with_a_newline_and_an_escape_sequence_is_logged_as_one_line)
{
    const char *text = stderr_of(log_unquoted_newline);
    char *nl = strchr(text, '\n');
    cr_assert_not_null(nl);
    cr_assert_eq(nl[1], '\0', "one line: %s", text);
    cr_assert_null(strchr(text, '\x1b'));
    cr_assert_null(strchr(text, '\a'));
    cr_assert(strstr(text, "path=/x\\nts=0 level=error"), "%s", text);
    cr_assert(strstr(text, "\\u001b]0;t\\u0007\n"), "%s", text);
}

static void log_too_long(void)
{
    char big[400];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[200] = ' ';
    LOG_INFO("test", "event=long a=%s b=%s c=%s d=%s e=%s f=%s g=%s h=%s i=%s j=%s k=%s l=%s",
             LOGV(big), LOGV(big), LOGV(big), LOGV(big), LOGV(big), LOGV(big), LOGV(big),
             LOGV(big), LOGV(big), LOGV(big), LOGV(big), LOGV(big));
}

Test(log, a_line_too_long_is_cut_between_pairs_and_says_so)
{
    const char *text = stderr_of(log_too_long);
    size_t n = strlen(text);
    cr_assert_gt(n, 1000);
    cr_assert_eq(strchr(text, '\n'), text + n - 1, "one line");
    cr_assert(strstr(text, "\" truncated=true\n"), "cut after a whole quoted value: %s",
              text + n - 80);
    size_t quotes = 0;
    for (const char *p = text; *p; p++) quotes += *p == '"';
    cr_assert_eq(quotes % 2, 0, "no value left open");
}
