/* tests/test_timefmt.c - lib/timefmt.c: RFC 3339 times in UTC, written as
 * Kubernetes status, Leases and the logs need them and read back. */
#include "timefmt.h"

#include <criterion/criterion.h>

#include <string.h>

#define NOW 1700000000LL /* 2023-11-14T22:13:20Z */

Test(timefmt, time_strings_round_trip)
{
    char ts[TIMEFMT_LEN];
    long long t;
    timefmt_rfc3339(ts, NOW, 0, 0);
    cr_assert_str_eq(ts, "2023-11-14T22:13:20Z");
    cr_assert_eq(timefmt_parse(ts, &t), 0);
    cr_assert_eq(t, NOW);
    cr_assert_eq(timefmt_parse("2023-11-14T23:13:20.5+01:00", &t), 0);
    cr_assert_eq(t, NOW);
    cr_assert_eq(timefmt_parse("yesterday", &t), -1);
    cr_assert_eq(timefmt_parse(NULL, &t), -1);
}

Test(timefmt, fractions_for_logs_and_micro_times)
{
    char ts[TIMEFMT_LEN];
    timefmt_rfc3339(ts, NOW, 123456789L, 3);
    cr_assert_str_eq(ts, "2023-11-14T22:13:20.123Z");
    timefmt_rfc3339(ts, NOW, 123456789L, 6);
    cr_assert_str_eq(ts, "2023-11-14T22:13:20.123456Z");
    timefmt_rfc3339(ts, 0, 0, 0);
    cr_assert_str_eq(ts, "1970-01-01T00:00:00Z");
    timefmt_rfc3339(ts, 951782400LL, 0, 0); /* a leap day */
    cr_assert_str_eq(ts, "2000-02-29T00:00:00Z");
    timefmt_now(ts, 6);
    cr_assert_eq(strlen(ts), 27, "%s", ts);
    long long t;
    cr_assert_eq(timefmt_parse(ts, &t), 0);
}

Test(timefmt, every_day_from_1970_to_2100_reads_back_as_written_february_included)
{
    char ts[TIMEFMT_LEN];
    long long t;
    cr_assert_eq(timefmt_parse("2000-02-29T00:00:00Z", &t), 0);
    cr_assert_eq(t, 951782400LL, "a leap day");
    cr_assert_eq(timefmt_parse("2024-02-01T12:00:00Z", &t), 0);
    cr_assert_eq(t, 1706788800LL);
    for (long long day = 0; day < 47482; day++) { /* 1970-01-01 .. 2100-01-01 */
        const long long at = day * 86400 + 3723;
        timefmt_rfc3339(ts, at, 0, 0);
        cr_assert_eq(timefmt_parse(ts, &t), 0, "%s", ts);
        cr_assert_eq(t, at, "%s read back as %lld, want %lld", ts, t, at);
    }
}

/* kubectl's ages (k8s.io/apimachinery/pkg/util/duration.HumanDuration): each
 * unit up to its threshold, the next smaller one beside it only in the
 * first stretch of the next unit, a zero remainder left off. */
Test(timefmt, durations_read_as_kubectl_ages_at_every_unit_boundary)
{
    static const struct {
        long long s;
        const char *want;
    } cases[] = {
        {-2, "<invalid>"}, {-1, "0s"}, {0, "0s"}, {45, "45s"}, {119, "119s"},
        {120, "2m"}, {192, "3m12s"}, {599, "9m59s"},
        {600, "10m"}, {659, "10m"}, {10799, "179m"},
        {10800, "3h"}, {11100, "3h5m"}, {28799, "7h59m"},
        {28800, "8h"}, {172799, "47h"},
        {172800, "2d"}, {273600, "3d4h"}, {691199, "7d23h"},
        {691200, "8d"}, {63071999, "729d"},
        {63072000, "2y"}, {63158400, "2y1d"}, {252287999, "7y364d"},
        {252288000, "8y"}, {3153600000LL, "100y"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char d[TIMEFMT_DUR_LEN];
        timefmt_duration(d, cases[i].s);
        cr_expect_str_eq(d, cases[i].want, "%llds: %s, not %s", cases[i].s, d, cases[i].want);
    }
}
