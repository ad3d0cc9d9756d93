/* tests/test_yaml_json.c - lib/yaml_json.c: the one YAML -> JSON conversion,
 * typed (YAML 1.1 scalars, no aliases: configs) and untyped (strings, aliases
 * resolved: kubeconfigs); errors carry the line and column. */
#include "yaml_json.h"

#include <criterion/criterion.h>

#include <string.h>

static cJSON *parse(const char *text, int typed, int aliases, char *err, size_t errlen)
{
    yaml_json_opts o = {typed, aliases};
    cJSON *out = NULL;
    err[0] = '\0';
    if (yaml_json_parse(text, strlen(text), &o, &out, err, errlen) != 0)
        return NULL;
    cr_assert_not_null(out, "a non-empty document gives a tree");
    return out;
}

Test(yaml_json, typed_scalars_resolve_as_yaml_1_1_and_quoted_ones_stay_strings)
{
    char err[256];
    cJSON *j = parse("a: 12\nb: 1.5e3\nc: yes\nd: ~\ne: \"12\"\nf: !!str 7\ng: 0123\nh: [1, x]\n",
                     1, 0, err, sizeof err);
    cr_assert_not_null(j, "%s", err);
    cr_assert_eq(cJSON_GetObjectItem(j, "a")->valuedouble, 12);
    cr_assert_eq(cJSON_GetObjectItem(j, "b")->valuedouble, 1500);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "c")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "d")));
    cr_assert_str_eq(cJSON_GetObjectItem(j, "e")->valuestring, "12");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "f")->valuestring, "7");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "g")->valuestring, "0123", "octal or decimal: ambiguous");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "h")), 2);
    cJSON_Delete(j);
}

Test(yaml_json, untyped_scalars_are_strings_and_aliases_repeat_their_anchor)
{
    char err[256];
    cJSON *j = parse("users:\n- name: u\n  user: &creds {token: abc, port: 443}\n"
                     "other: *creds\nflag: true\n", 0, 1, err, sizeof err);
    cr_assert_not_null(j, "%s", err);
    cJSON *other = cJSON_GetObjectItem(j, "other");
    cr_assert_str_eq(cJSON_GetObjectItem(other, "token")->valuestring, "abc");
    cr_assert_str_eq(cJSON_GetObjectItem(other, "port")->valuestring, "443");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "flag")->valuestring, "true");
    cJSON_Delete(j);
}

Test(yaml_json, aliases_where_refused_second_documents_and_syntax_errors_name_the_place)
{
    char err[256];
    cr_assert_null(parse("base: &b {steps: 1}\ntraining: *b\n", 1, 0, err, sizeof err));
    cr_assert(strstr(err, "invalid YAML at line 2") && strstr(err, "aliases"), "%s", err);
    cr_assert_null(parse("a: 1\n---\na: 2\n", 1, 0, err, sizeof err));
    cr_assert(strstr(err, "invalid YAML at line 2") && strstr(err, "second one"), "%s", err);
    cr_assert_null(parse("a: *nowhere\n", 0, 1, err, sizeof err));
    cr_assert(strstr(err, "names no anchor"), "%s", err);
    cr_assert_null(parse("training: {steps: 1\n", 1, 0, err, sizeof err));
    cr_assert(strstr(err, "invalid YAML at line 2 column 1: "), "%s", err);
    cJSON *out = (cJSON *)1;
    cr_assert_eq(yaml_json_parse("", 0, NULL, &out, err, sizeof err), 0);
    cr_assert_null(out, "an empty document is no tree");
}

Test(yaml_json, numbers_with_a_unit_or_trailing_text_and_signed_leading_zeros_stay_strings)
{
    /* "4Gi" is a quantity, not the number 4; -0123 is as ambiguous as 0123 */
    char err[256];
    cJSON *j = parse("a: 4Gi\nb: 12abc\nc: 1.5x\nd: -0123\ne: +0123\nf: -12\ng: 1e3\n", 1, 0, err,
                     sizeof err);
    cr_assert_not_null(j, "%s", err);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "a")->valuestring, "4Gi");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "b")->valuestring, "12abc");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "c")->valuestring, "1.5x");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "d")->valuestring, "-0123");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "e")->valuestring, "+0123");
    cr_assert_eq(cJSON_GetObjectItem(j, "f")->valuedouble, -12);
    cr_assert_eq(cJSON_GetObjectItem(j, "g")->valuedouble, 1000);
    cJSON_Delete(j);
}
