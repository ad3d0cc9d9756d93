/* tests/test_json.c - lib/json.c: getters that answer "absent" for NULL,
 * non-objects, missing keys and values of the wrong type. */
#include "json.h"

#include <criterion/criterion.h>

Test(json, getters_read_present_values_and_answer_absent_for_everything_else)
{
    cJSON *o = cJSON_Parse("{\"a\":{\"b\":\"x\",\"n\":42.9},\"s\":\"str\",\"arr\":[1]}");
    cr_assert_not_null(o);
    cr_assert_str_eq(json_str(json_get(o, "a"), "b"), "x");
    cr_assert_str_eq(json_at(o, "a", "b")->valuestring, "x");
    cr_assert_eq(json_at(o, "s", NULL), json_get(o, "s"));
    cr_assert_eq(json_int(json_get(o, "a"), "n", -1), 42);
    cr_assert_eq(json_int(o, "s", -1), -1, "a string is not a number");
    cr_assert_null(json_str(o, "arr"), "an array is not a string");
    cr_assert_null(json_get(o, "missing"));
    cr_assert_null(json_get(NULL, "a"));
    cr_assert_null(json_get(json_get(o, "arr"), "0"), "an array is not an object");
    cr_assert_null(json_at(o, "missing", "b"));
    cr_assert_eq(json_int(NULL, "n", 7), 7);
    cJSON_Delete(o);
}

Test(json, integers_beyond_32_bits_keep_their_value)
{
    /* byte counts and timestamps: json_int is long long, not int */
    cJSON *o = cJSON_Parse("{\"big\":5000000000,\"neg\":-3000000000,\"ts\":1700000000123}");
    cr_assert_not_null(o);
    cr_assert_eq(json_int(o, "big", -1), 5000000000LL);
    cr_assert_eq(json_int(o, "neg", -1), -3000000000LL);
    cr_assert_eq(json_int(o, "ts", -1), 1700000000123LL);
    cJSON_Delete(o);
}
