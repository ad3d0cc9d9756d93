/* lib/timefmt.c - see timefmt.h.
 *
 * Owns: RFC 3339 formatting and parsing in UTC; kubectl-style durations.
 * Must not: allocate or depend on the process's time zone.
 */
#include "timefmt.h"

#include <stdio.h>
#include <time.h>

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's). */
static long long days_from_civil(long long y, unsigned m, unsigned d)
{
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long long)doe - 719468;
}

void timefmt_rfc3339(char buf[TIMEFMT_LEN], long long t, long nsec, int frac_digits)
{
    long long days = t >= 0 ? t / 86400 : -((-t + 86399) / 86400);
    long long secs = t - days * 86400;
    /* civil_from_days */
    long long z = days + 719468;
    long long era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long y = (long long)yoe + era * 400;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    unsigned d = doy - (153 * mp + 2) / 5 + 1;
    unsigned m = mp < 10 ? mp + 3 : mp - 9;
    y += m <= 2;
    if (y < 0 || y > 9999)
        y = y < 0 ? 0 : 9999;
    unsigned hs = (unsigned)(secs / 3600) % 24u, ms = (unsigned)(secs / 60) % 60u,
             ss = (unsigned)secs % 60u;
    int n = snprintf(buf, TIMEFMT_LEN, "%04u-%02u-%02uT%02u:%02u:%02u", (unsigned)y % 10000u,
                     m % 100u, d % 100u, hs, ms, ss);
    if (nsec < 0 || nsec > 999999999)
        nsec = 0;
    if (frac_digits == 3)
        snprintf(buf + n, (size_t)(TIMEFMT_LEN - n), ".%03ldZ", nsec / 1000000L);
    else if (frac_digits == 6)
        snprintf(buf + n, (size_t)(TIMEFMT_LEN - n), ".%06ldZ", nsec / 1000L);
    else
        snprintf(buf + n, (size_t)(TIMEFMT_LEN - n), "Z");
}

/* "<a><ua><b><ub>", or "<a><ua>" when b is 0 */
static void two_units(char buf[TIMEFMT_DUR_LEN], long long a, char ua, long long b, char ub)
{
    if (b) snprintf(buf, TIMEFMT_DUR_LEN, "%lld%c%lld%c", a, ua, b, ub);
    else snprintf(buf, TIMEFMT_DUR_LEN, "%lld%c", a, ua);
}

void timefmt_duration(char buf[TIMEFMT_DUR_LEN], long long s)
{
    /* HumanDuration's cut-offs, each unit truncated as it truncates them */
    if (s < -1) {
        snprintf(buf, TIMEFMT_DUR_LEN, "<invalid>");
        return;
    }
    if (s < 0) s = 0;
    long long m = s / 60, h = s / 3600, d = h / 24, y = d / 365;
    if (s < 2 * 60) two_units(buf, s, 's', 0, 0);
    else if (m < 10) two_units(buf, m, 'm', s % 60, 's');
    else if (m < 3 * 60) two_units(buf, m, 'm', 0, 0);
    else if (h < 8) two_units(buf, h, 'h', m % 60, 'm');
    else if (h < 48) two_units(buf, h, 'h', 0, 0);
    else if (d < 8) two_units(buf, d, 'd', h % 24, 'h');
    else if (y < 2) two_units(buf, d, 'd', 0, 0);
    else if (y < 8) two_units(buf, y, 'y', d % 365, 'd');
    else two_units(buf, y, 'y', 0, 0);
}

void timefmt_now(char buf[TIMEFMT_LEN], int frac_digits)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    timefmt_rfc3339(buf, (long long)ts.tv_sec, ts.tv_nsec, frac_digits);
}

int timefmt_parse(const char *s, long long *out)
{
    int y, mo, d, h, mi, sec, n = 0;
    if (s == NULL || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 ||
        n != 19)
        return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return -1;
    const char *p = s + n;
    if (*p == '.' || *p == ',') {
        p++;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    long long off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om, k = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &k) != 2 || k != 5)
            return -1;
        off = (oh * 3600LL + om * 60LL) * (*p == '+' ? 1 : -1);
        p += 6;
    } else {
        return -1;
    }
    if (*p != '\0')
        return -1;
    *out = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600LL + mi * 60LL + sec - off;
    return 0;
}
