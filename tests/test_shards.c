/* tests/test_shards.c - worker/data/shards.c: webdataset's brace notation
 * expands as the braceexpand package does (zero-padded ranges, lists,
 * several braces with the last varying fastest, plain names as they are),
 * and every malformed, reversed or too large pattern is refused with a
 * message naming the pattern and what is wrong, before anything is built. */
#include <criterion/criterion.h>
#include <string.h>

#include "shards.h"

TestSuite(shards, .timeout = 30);

static shards_list *ok(const char *pattern, size_t n)
{
    char err[512] = "";
    shards_list *l = shards_new(pattern, SHARDS_MAX_DEFAULT, err, sizeof err);
    cr_assert_not_null(l, "%s: %s", pattern, err);
    cr_assert_eq(shards_count(l), n, "%s: %zu names", pattern, shards_count(l));
    return l;
}

static void refused(const char *pattern, size_t max, const char *why)
{
    char err[512] = "";
    shards_list *l = shards_new(pattern, max, err, sizeof err);
    cr_assert_null(l, "%s expanded", pattern);
    cr_assert(strstr(err, pattern), "the message names the pattern: %s", err);
    cr_assert(strstr(err, why), "'%s' not in: %s", why, err);
}

Test(shards, a_plain_name_is_itself)
{
    shards_list *l = ok("s3://bucket/train.tar", 1);
    cr_assert_str_eq(shards_at(l, 0), "s3://bucket/train.tar");
    cr_assert_null(shards_at(l, 1));
    shards_free(l);
}

Test(shards, a_zero_padded_range_gives_every_shard_at_its_width)
{
    shards_list *l = ok("s3://b/train-{000000..001023}.tar", 1024);
    cr_assert_str_eq(shards_at(l, 0), "s3://b/train-000000.tar");
    cr_assert_str_eq(shards_at(l, 1), "s3://b/train-000001.tar");
    cr_assert_str_eq(shards_at(l, 1023), "s3://b/train-001023.tar");
    shards_free(l);
    l = ok("x{08..10}", 3);
    cr_assert_str_eq(shards_at(l, 0), "x08");
    cr_assert_str_eq(shards_at(l, 2), "x10");
    shards_free(l);
}

Test(shards, a_range_without_leading_zeros_is_not_padded)
{
    shards_list *l = ok("x{8..10}y", 3);
    cr_assert_str_eq(shards_at(l, 0), "x8y");
    cr_assert_str_eq(shards_at(l, 2), "x10y");
    shards_free(l);
    l = ok("{0..2}", 3);
    cr_assert_str_eq(shards_at(l, 0), "0");
    shards_free(l);
    l = ok("{5..5}", 1);
    cr_assert_str_eq(shards_at(l, 0), "5");
    shards_free(l);
}

Test(shards, several_braces_and_lists_vary_the_last_fastest)
{
    shards_list *l = ok("/d/{train,val}-{0..1}-{a,b}.tar", 8);
    const char *want[] = {"/d/train-0-a.tar", "/d/train-0-b.tar", "/d/train-1-a.tar",
                          "/d/train-1-b.tar", "/d/val-0-a.tar",   "/d/val-0-b.tar",
                          "/d/val-1-a.tar",   "/d/val-1-b.tar"};
    for (size_t i = 0; i < 8; i++)
        cr_assert_str_eq(shards_at(l, i), want[i]);
    shards_free(l);
}

Test(shards, malformed_braces_are_refused_naming_the_byte)
{
    refused("train-{000..010.tar", 100, "the '{' at byte 6 has no '}'");
    refused("train-000}.tar", 100, "a '}' at byte 9 without its '{'");
    refused("a{{1..2}}", 100, "nested braces at byte 2");
    refused("a{}b", 100, "empty braces at byte 1");
    refused("a{x,,y}", 100, "an empty alternative");
    refused("a{x..3}", 100, "not {FIRST..LAST}");
    refused("a{1..}", 100, "not {FIRST..LAST}");
    refused("a{1...3}", 100, "not {FIRST..LAST}");
    refused("a{1234567890123456789..1234567890123456799}", 100, "at most 18 digits");
}

Test(shards, a_reversed_range_is_refused)
{
    refused("train-{010..001}.tar", 100, "the range at byte 6 is reversed (10 > 1)");
}

Test(shards, a_pattern_over_the_limit_is_refused_and_says_the_limit)
{
    refused("t-{0..100}", 100, "expands to more than the limit of 100 names");
    refused("t-{0..999999999999999999}", SHARDS_MAX_DEFAULT, "the limit of 1000000 names");
    /* each group under the limit, their product over it (and over size_t) */
    refused("{0..999}{0..999}{0..999}{0..999}{0..999}{0..999}{0..999}", SHARDS_MAX_DEFAULT,
            "the limit of 1000000 names");
    shards_list *l = ok("t-{0..9}{0..9}", 100);
    shards_free(l);
}
