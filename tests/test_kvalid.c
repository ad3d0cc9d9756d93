/* tests/test_kvalid.c - operator/kvalid.c: names, label values and resource
 * quantities judged as the Kubernetes API server judges them. */
#include "kvalid.h"

#include <criterion/criterion.h>

#include <math.h>
#include <string.h>

Test(kvalid, dns1035_label_refuses_leading_digits_dots_and_capitals_that_subdomains_allow)
{
    char why[128];
    cr_assert(kv_is_dns1035_label("my-job", why, sizeof why));
    cr_assert(kv_is_dns1035_label("a", NULL, 0));
    cr_assert_not(kv_is_dns1035_label("1job", why, sizeof why), "a Service name must start with a letter");
    cr_assert(strstr(why, "start with a lowercase letter"), "%s", why);
    cr_assert_not(kv_is_dns1035_label("my.job", why, sizeof why));
    cr_assert_not(kv_is_dns1035_label("Job", why, sizeof why));
    cr_assert_not(kv_is_dns1035_label("job-", why, sizeof why));
    cr_assert_not(kv_is_dns1035_label("", why, sizeof why));
    char long_name[70];
    memset(long_name, 'a', 64);
    long_name[64] = '\0';
    cr_assert_not(kv_is_dns1035_label(long_name, why, sizeof why));
    cr_assert(strstr(why, "no more than 63"), "%s", why);
    long_name[63] = '\0';
    cr_assert(kv_is_dns1035_label(long_name, why, sizeof why));
    /* both of the refused names are fine ViTJob names */
    cr_assert(kv_is_dns1123_subdomain("1job", why, sizeof why));
    cr_assert(kv_is_dns1123_subdomain("my.job", why, sizeof why));
    cr_assert(kv_is_dns1123_label("1job", why, sizeof why));
    cr_assert_not(kv_is_dns1123_label("my.job", why, sizeof why));
}

Test(kvalid, subdomains_qualified_names_and_label_values)
{
    char why[128];
    cr_assert_not(kv_is_dns1123_subdomain("a..b", why, sizeof why));
    cr_assert_not(kv_is_dns1123_subdomain(".a", why, sizeof why));
    cr_assert_not(kv_is_dns1123_subdomain("a_b", why, sizeof why));
    cr_assert(kv_is_qualified_name("nvidia.com/gpu", why, sizeof why));
    cr_assert(kv_is_qualified_name("node.kubernetes.io/instance-type", why, sizeof why));
    cr_assert(kv_is_qualified_name("Gpu_Type.v2", why, sizeof why));
    cr_assert_not(kv_is_qualified_name("/gpu", why, sizeof why));
    cr_assert_not(kv_is_qualified_name("Nvidia.com/gpu", why, sizeof why), "prefix is a lowercase subdomain");
    cr_assert_not(kv_is_qualified_name("a/b/c", why, sizeof why));
    cr_assert_not(kv_is_qualified_name("gpu-", why, sizeof why));
    cr_assert(kv_is_label_value("", why, sizeof why));
    cr_assert(kv_is_label_value("H100_80GB-HBM3", why, sizeof why));
    cr_assert_not(kv_is_label_value("a b", why, sizeof why));
    cr_assert_not(kv_is_label_value("-a", why, sizeof why));
}

Test(kvalid, quantities_follow_parse_quantity_and_carry_their_value)
{
    long double v;
    char why[200];
    struct { const char *s; long double v; } ok[] = {
        {"2", 2}, {"500m", 0.5L}, {"1.5", 1.5L}, {"4Gi", 4294967296.0L}, {"1e3", 1000},
        {"1E3", 1000}, {"+4k", 4000}, {".5", 0.5L}, {"1.", 1}, {"2E", 2e18L}, {"-1", -1},
        {"100n", 1e-7L}, {"3Ki", 3072}, {"1e-3", 0.001L},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        cr_assert(kv_parse_quantity(ok[i].s, &v, why, sizeof why), "%s: %s", ok[i].s, why);
        cr_assert(fabsl(v - ok[i].v) <= fabsl(ok[i].v) * 1e-9L + 1e-15L,
                  "%s = %Lg, not %Lg", ok[i].s, v, ok[i].v);
    }
    const char *bad[] = {"lots", "", "1.5.5", "2 Gi", "Gi", "1ki", "1e", "1Gb", "--1", "1m2", "."};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_not(kv_parse_quantity(bad[i], &v, why, sizeof why), "\"%s\" accepted", bad[i]);
        cr_assert(strstr(why, "quantities must match the regular expression '" KV_QUANTITY_REGEX "'"),
                  "%s: %s", bad[i], why);
    }
}

Test(kvalid, a_subdomain_of_253_characters_is_valid_and_254_is_not)
{
    char why[128], name[300];
    memset(name, 'a', 254);
    for (int i = 63; i < 254; i += 64) name[i] = '.'; /* labels of 63 */
    name[253] = '\0';
    cr_assert(kv_is_dns1123_subdomain(name, why, sizeof why), "253: %s", why);
    name[253] = 'a';
    name[254] = '\0';
    cr_assert_not(kv_is_dns1123_subdomain(name, why, sizeof why));
    cr_assert(strstr(why, "no more than 253"), "%s", why);
}

Test(kvalid, every_label_of_a_subdomain_must_end_with_an_alphanumeric)
{
    char why[128];
    cr_assert_not(kv_is_dns1123_subdomain("a-", why, sizeof why));
    cr_assert(strstr(why, "start and end with an alphanumeric"), "%s", why);
    cr_assert_not(kv_is_dns1123_subdomain("my-.job", why, sizeof why));
    cr_assert_not(kv_is_dns1123_subdomain("my.job-", why, sizeof why));
    cr_assert_not(kv_is_dns1123_subdomain("-my.job", why, sizeof why));
    cr_assert(kv_is_dns1123_subdomain("my-job.a-b", why, sizeof why), "%s", why);
}
