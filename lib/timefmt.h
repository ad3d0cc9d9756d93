/* lib/timefmt.h - RFC 3339 times in UTC, as Kubernetes and the logs write them.
 *
 * Owns: turning seconds since the epoch into "2024-01-02T03:04:05Z" (with
 * optional milli- or microseconds) and back, with a proleptic Gregorian
 * calendar that needs no time zone database.
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

#endif
