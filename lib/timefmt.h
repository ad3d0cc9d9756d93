/* lib/timefmt.h - RFC 3339 times in UTC, as Kubernetes and the logs write them.
 *
 * Owns: turning seconds since the epoch into "2024-01-02T03:04:05Z" (with
 * optional milli- or microseconds) and back, with a proleptic Gregorian
 * calendar that needs no time zone database; a span of seconds as kubectl
 * prints an age ("3m12s").
 * Must not: allocate, or read any clock other than CLOCK_REALTIME in
 * timefmt_now.
 */
#ifndef VITJOB_TIMEFMT_H
#define VITJOB_TIMEFMT_H

#define TIMEFMT_LEN 40 /* "YYYY-MM-DDTHH:MM:SS.uuuuuuZ" + NUL, with room */

/* sec (+ nsec) as RFC 3339 UTC into buf; frac_digits 0 ("...05Z"), 3
 * ("...05.123Z") or 6 ("...05.123456Z", a Kubernetes MicroTime). Years
 * outside 0..9999 are clamped. */
void timefmt_rfc3339(char buf[TIMEFMT_LEN], long long sec, long nsec, int frac_digits);

/* The wall-clock time now (CLOCK_REALTIME), formatted as timefmt_rfc3339. */
void timefmt_now(char buf[TIMEFMT_LEN], int frac_digits);

/* RFC 3339 ("...Z" or "...+hh:mm", fractional seconds ignored) -> seconds
 * since the epoch. Returns 0, or -1 if s is not such a time (NULL included). */
int timefmt_parse(const char *s, long long *out);

#define TIMEFMT_DUR_LEN 32 /* "292277026596y" and more, with room */

/* seconds as kubectl prints an age (k8s.io/apimachinery/pkg/util/duration
 * HumanDuration): "45s" below 2m, "3m12s" below 10m, "179m" below 3h,
 * "7h59m" below 8h, "47h" below 2d, "3d4h" below 8d, "729d" below 2y,
 * "2y1d" below 8y, then "8y"; a zero remainder is left off ("3m", not
 * "3m0s"); -1 is "0s", less is "<invalid>". */
void timefmt_duration(char buf[TIMEFMT_DUR_LEN], long long seconds);

#endif
