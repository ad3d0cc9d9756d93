/* tests/test_randaug_spec.c - api/randaug_spec.c: timm's RandAugment string.
 *
 * Owns: what good strings mean (defaults, every key, timm's mstd > 100 and
 * mmax 0 rules) and that every malformed string is refused with a message
 * naming the key, the string and the section. What the parsed spec does is
 * tests/test_randaug.c's and tests/randaug.bats's.
 * Must not: depend on the network, on Python, or on time.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "randaug_spec.h"

TestSuite(randaug_spec, .timeout = 60);

static randaug_spec parse_ok(const char *s)
{
    randaug_spec r;
    char err[1024] = "";
    cr_assert_eq(randaug_spec_parse(s, "data.randAugment", &r, err, sizeof err), 0,
                 "\"%s\" refused: %s", s, err);
    return r;
}

Test(randaug_spec, empty_is_off_with_the_defaults)
{
    randaug_spec r = parse_ok("");
    cr_assert_eq(r.enabled, 0);
    cr_assert_eq(r.num_ops, 2);
    cr_assert_eq(r.magnitude, 10);
    cr_assert_eq(r.prob, 0.5);
    r = parse_ok(NULL);
    cr_assert_eq(r.enabled, 0);
}

Test(randaug_spec, deits_string_is_m9_mstd05_increasing_with_timms_defaults)
{
    randaug_spec r = parse_ok("rand-m9-mstd0.5-inc1");
    cr_assert_eq(r.enabled, 1);
    cr_assert_eq(r.magnitude, 9);
    cr_assert_eq(r.magnitude_std, 0.5);
    cr_assert_eq(r.increasing, 1);
    cr_assert_eq(r.num_ops, 2);
    cr_assert_eq(r.prob, 0.5);
    cr_assert_eq(r.magnitude_max, 0);
    cr_assert_eq(randaug_spec_upper(&r), 10.0);
}

Test(randaug_spec, every_key_in_any_order)
{
    randaug_spec r = parse_ok("rand-p0.9-mmax20-n3-inc2-mstd1e1-m07");
    cr_assert_eq(r.num_ops, 3);
    cr_assert_eq(r.magnitude, 7);
    cr_assert_eq(r.prob, 0.9);
    cr_assert_eq(r.magnitude_std, 10.0);
    cr_assert_eq(r.magnitude_max, 20);
    cr_assert_eq(randaug_spec_upper(&r), 20.0);
    cr_assert_eq(r.increasing, 1);
    r = parse_ok("rand");
    cr_assert_eq(r.enabled, 1);
    cr_assert_eq(r.increasing, 0);
    cr_assert_eq(r.magnitude_std, 0.0);
    r = parse_ok("rand-n0-p0-m0");
    cr_assert_eq(r.num_ops, 0);
    cr_assert_eq(r.prob, 0.0);
    cr_assert_eq(r.magnitude, 0);
}

Test(randaug_spec, mstd_above_100_is_uniform_and_mmax0_is_the_default_bound)
{
    randaug_spec r = parse_ok("rand-m9-mstd101");
    cr_assert(isinf(r.magnitude_std));
    r = parse_ok("rand-m9-mstd100");
    cr_assert_eq(r.magnitude_std, 100.0);
    r = parse_ok("rand-m9-mmax0");
    cr_assert_eq(randaug_spec_upper(&r), 10.0);
}

static void refused(const char *s, const char *section_words)
{
    randaug_spec r = {0};
    char err[1024] = "";
    cr_assert_eq(randaug_spec_parse(s, "data.randAugment", &r, err, sizeof err), -1,
                 "\"%s\" accepted", s);
    cr_assert(strstr(err, "data.randAugment"), "\"%s\": %s", s, err);
    cr_assert(strstr(err, section_words), "\"%s\": %s (wanted \"%s\")", s, err, section_words);
}

Test(randaug_spec, unknown_sections_and_ops_are_refused_naming_the_key_and_section)
{
    refused("rand-m9-foo1", "unknown section \"foo1\"");
    refused("rand-m9-Rotate", "unknown section \"Rotate\": no number");
    refused("rand-m9-x", "unknown section \"x\"");
    refused("rand-w0", "unknown section \"w0\"");
    refused("rand-M9", "unknown section \"M9\"");
    refused("rand-tweights", "section \"tweights\": timm's transform sets");
    refused("rand-t3a-m9", "section \"t3a\"");
    refused("augmix-m3", "must start with \"rand\"");
    refused("random-m9", "must start with \"rand\"");
    refused("m9-rand", "must start with \"rand\"");
}

Test(randaug_spec, malformed_and_out_of_range_numbers_are_refused)
{
    refused("rand-m9.5", "section \"m9.5\": \"9.5\" is not an integer");
    refused("rand-m9x", "\"9x\" is not an integer");
    refused("rand-m1001", "\"1001\" is not an integer in 0..1000");
    refused("rand-m99999999999999", "is not an integer");
    refused("rand-n101", "\"101\" is not an integer in 0..100");
    refused("rand-p1.5", "\"1.5\" is not a probability");
    refused("rand-p0.5.5", "is not a probability");
    refused("rand-mstd0.5e", "is not a number");
    refused("rand-mstd0x1p3", "is not a number");
    refused("rand-mmax2.5", "\"2.5\" is not an integer");
    refused("rand-inc1.0", "is not an integer");
}

Test(randaug_spec, empty_sections_repeats_and_inc0_are_refused)
{
    refused("rand--m9", "an empty section");
    refused("rand-m9-", "an empty section");
    refused("rand-", "an empty section");
    refused("rand-m9-m8", "m given twice");
    refused("rand-mstd1-mstd2", "mstd given twice");
    refused("rand-inc0", "\"inc0\"");
    char longs[200] = "rand-m";
    memset(longs + 6, '9', 100);
    refused(longs, "a section of");
}
