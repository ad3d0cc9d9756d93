/* tests/test_report.c - worker/train/report.c against the test API server
 * (tests/cluster/apiserver) with the project's CRD and a real ViTJob: the
 * status.progress it writes, through the in-cluster configuration with a
 * service-account token that may patch only its job's status; off outside
 * Kubernetes; at most one write per interval; refused writes logged once
 * per interval; training's hand-over never waiting for the network; the
 * final state at exit. No outcome here depends on how fast the machine is:
 * bounds on the number of writes are taken from the time the test measured
 * around them, waits are for a condition (with a cap far beyond need), and
 * "did not wait" is shown by order (the hand-overs return while a write is
 * still unanswered), not by a stopwatch. */
#define KUBE_FIXTURE_SERVER
#include "kube_fixture.h"

#include <math.h>
#include <poll.h>
#include <stdatomic.h>

#include "contract.h"
#include "file.h"
#include "report.h"
#include "timefmt.h"
#include "util.h"
#include "yaml_json.h"


#include "job_fixture.h"

static const cJSON *progress_of(const cJSON *job)
{
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(job, "status"),
                                            "progress");
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(x), "%s is not a number", key);
    return x->valuedouble;
}

/* stderr into a file while a test runs, to read what was logged. */
static int capture_stderr(const char *path)
{
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(fd >= 0);
    dup2(fd, 2);
    close(fd);
    return saved;
}

static void restore_stderr(int saved)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

static int count_lines_with(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static report_info info(long step)
{
    return (report_info){.step = step, .total_steps = 1000, .epoch = step / 100.0,
                         .loss = 2.0 - step / 1000.0, .images_per_second = 512.5,
                         .eta_seconds = (1000 - step) * 0.25, .last_checkpoint_step = -1,
                         .test_accuracy = NAN, .test_step = -1};
}

/* a report's wait for its final write at exit: far more than any write
 * to the test server takes, on any machine; it is a cap, not a delay */
#define FINAL_S 20.0

/* Polls cond() every 10 ms until it holds or cap_s passes; whether it held. */
static int wait_until(int (*cond)(void *), void *ctx, double cap_s)
{
    double t0 = mono_seconds();
    while (!cond(ctx)) {
        if (mono_seconds() - t0 > cap_s) return 0;
        sleep_ms(10);
    }
    return 1;
}

struct failed_at_least {
    report *r;
    long n;
};
static int has_failed(void *ctx)
{
    struct failed_at_least *f = ctx;
    return report_failed(f->r) >= f->n;
}

static int one_patch(void *ctx)
{
    (void)ctx;
    return atomic_load(&patches) >= 1;
}

/* a connection waits in listener s's queue: a request has gone out to it */
static int connection_pending(void *ctx)
{
    struct pollfd p = {.fd = *(int *)ctx, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

TestSuite(report, .timeout = 60);

/* status.progress.eta, asserted present */
static const char *eta_of(const cJSON *job)
{
    const char *e = str_at(cJSON_GetObjectItem(job, "status"), "progress", "eta");
    cr_assert(e, "status.progress.eta is a string");
    return e;
}

/* what kubectl get vj prints is what the status holds: loss to 4
 * significant digits, images/s to 1 decimal */
Test(report_round, loss_keeps_four_significant_digits_at_any_magnitude)
{
    cr_assert_eq(report_round_sig(0.39043454825878143, 4), 0.3904);
    cr_assert_eq(report_round_sig(2.302585092994046, 4), 2.303);
    cr_assert_eq(report_round_sig(0.000123456, 4), 0.0001235);
    cr_assert_eq(report_round_sig(12345.678, 4), 12350.0);
    cr_assert_eq(report_round_sig(-0.51234, 4), -0.5123);
    cr_assert_eq(report_round_sig(0.0, 4), 0.0);
    cr_assert_eq(report_round_sig(1.234567e-20, 4), 1.235e-20);
    cr_assert_eq(report_round_sig(9.99999, 4), 10.0);
    cr_assert(isinf(report_round_sig(INFINITY, 4)), "not finite: as it was");
}

Test(report_round, throughput_keeps_one_decimal)
{
    cr_assert_eq(report_round_places(3317.91833261528, 1), 3317.9);
    cr_assert_eq(report_round_places(1830.26, 1), 1830.3);
    cr_assert_eq(report_round_places(0.04, 1), 0.0);
    cr_assert_eq(report_round_places(512.5, 1), 512.5);
    cr_assert(isnan(report_round_places(NAN, 1)), "not finite: as it was");
}

Test(report, loss_and_throughput_are_written_rounded_and_the_eta_as_a_kubectl_duration)
{
    pod pd;
    pod_for(&pd, "rep-round", 1, 1);
    report *r = report_from_env(
        &(report_options){.interval_s = 30, .final_timeout_s = FINAL_S, .sa_dir = pd.dir});
    cr_assert(r);
    report_info p = info(120);
    p.loss = 0.39043454825878143;
    p.images_per_second = 3317.91833261528;
    p.eta_seconds = 192.4;
    p.epoch = 0.5610666666666667;
    p.test_accuracy = 0.81234567;
    p.test_step = 100;
    report_progress(r, &p);
    report_free(r);
    cJSON *job = get_job(pd.admin, "rep-round");
    const cJSON *pr = progress_of(job);
    cr_assert(pr, "status.progress written");
    /* exactly the doubles that print short: 0.3904, not 0.39043454825878143;
     * kubectl get vj -o wide's EPOCH 0.56, not 0.5610666666666667 */
    cr_assert_eq(num(pr, "loss"), 0.3904);
    cr_assert_eq(num(pr, "epoch"), 0.56);
    cr_assert_eq(num(pr, "testAccuracy"), 0.8123);
    cr_assert_eq(num(pr, "testStep"), 100);
    cr_assert_eq(num(pr, "imagesPerSecond"), 3317.9);
    cr_assert_eq(num(pr, "etaSeconds"), 192);
    cr_assert_str_eq(eta_of(job), "3m12s");
    cJSON_Delete(job);
    pod_free(&pd);
}

Test(report, a_report_merges_every_progress_field_into_the_status_subresource_and_keeps_the_rest)
{
    pod pd;
    pod_for(&pd, "rep-fields", 1, 1);
    operator_status(&pd, "rep-fields", "{\"phase\":\"Running\",\"restarts\":2}");

    report *r = report_from_env(
        &(report_options){.interval_s = 30, .final_timeout_s = FINAL_S, .sa_dir = pd.dir});
    cr_assert(r, "reporting is on in a pod of a job");
    report_info p = info(120);
    p.last_checkpoint_step = 100;
    snprintf(p.last_checkpoint_uri, sizeof p.last_checkpoint_uri, "file:///ck/step-000000100");
    long long before = (long long)time(NULL);
    report_checkpoint(r, &p);
    report_free(r);
    cr_assert_eq(atomic_load(&patches), 1, "one PATCH: %d", atomic_load(&patches));

    cJSON *job = get_job(pd.admin, "rep-fields");
    const cJSON *pr = progress_of(job);
    cr_assert(pr, "status.progress written");
    cr_assert_eq(num(pr, "step"), 120);
    cr_assert_eq(num(pr, "totalSteps"), 1000);
    cr_assert_float_eq(num(pr, "epoch"), 1.2, 1e-12);
    cr_assert_float_eq(num(pr, "loss"), 1.88, 1e-12);
    cr_assert_float_eq(num(pr, "imagesPerSecond"), 512.5, 1e-12);
    cr_assert_eq(num(pr, "etaSeconds"), 220);
    cr_assert_str_eq(eta_of(job), "3m40s");
    cr_assert_eq(num(pr, "lastCheckpointStep"), 100);
    cr_assert_str_eq(cJSON_GetObjectItem(pr, "lastCheckpointURI")->valuestring,
                     "file:///ck/step-000000100");
    cr_assert_null(cJSON_GetObjectItem(pr, "testAccuracy"), "no evaluation yet: left out");
    cr_assert_null(cJSON_GetObjectItem(pr, "testStep"));
    long long t;
    const cJSON *ut = cJSON_GetObjectItem(pr, "updateTime");
    cr_assert(cJSON_IsString(ut));
    cr_assert_eq(timefmt_parse(ut->valuestring, &t), 0, "RFC 3339: %s", ut->valuestring);
    cr_assert(t >= before - 1 && t <= (long long)time(NULL) + 1, "updateTime is now");
    cr_assert_str_eq(str_at(job, "status", "phase"), "Running", "the operator's fields stay");
    cr_assert_eq(num(cJSON_GetObjectItem(job, "status"), "restarts"), 2);
    cJSON_Delete(job);
    pod_free(&pd);
}

Test(report, reporting_is_off_and_silent_outside_kubernetes_or_without_a_job)
{
    char dir[256], logp[300];
    make_tmpdir(dir, sizeof dir);
    snprintf(logp, sizeof logp, "%s/stderr", dir);
    int saved = capture_stderr(logp);
    unsetenv("KUBERNETES_SERVICE_HOST");
    setenv(VJ_ENV_NAME, "some-job", 1);
    report *off1 = report_from_env(&(report_options){.sa_dir = dir});
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "1", 1);
    unsetenv(VJ_ENV_NAME);
    report *off2 = report_from_env(&(report_options){.sa_dir = dir});
    setenv(VJ_ENV_NAME, "some-job", 1); /* ... and no service-account files */
    report *off3 = report_from_env(&(report_options){.sa_dir = dir});
    report_info p = info(1);
    report_progress(NULL, &p); /* what training calls when off */
    report_checkpoint(NULL, &p);
    report_free(NULL);
    restore_stderr(saved);
    cr_assert_null(off1, "no KUBERNETES_SERVICE_HOST: off");
    cr_assert_null(off2, "no job name: off");
    cr_assert_null(off3, "no service-account token: off");
    char *log = read_text(logp);
    cr_assert_str_eq(log, "", "nothing logged at info level: %s", log);
    free(log);
    rm_rf(dir);
}

Test(report, many_steps_handed_over_make_at_most_one_write_per_interval_and_the_newest_wins)
{
    pod pd;
    pod_for(&pd, "rep-interval", 1, 1);
    double t0 = mono_seconds();
    report *r = report_from_env(
        &(report_options){.interval_s = 0.5, .final_timeout_s = FINAL_S, .sa_dir = pd.dir});
    cr_assert(r);
    long step = 0;
    while (mono_seconds() - t0 < 1.6) {
        report_info p = info(++step);
        report_progress(r, &p);
        sleep_ms(1);
    }
    report_free(r); /* returns when its last write is answered */
    double t1 = mono_seconds();
    int n = atomic_load(&patches);
    /* The first write at once, each next one an interval after the end of
     * the one before, and one final write: at most 2 + (t1 - t0) / 0.5, in
     * whatever time the steps and the writes took (on a loaded machine a
     * write still in flight when the steps end counts too). At least two:
     * the first step's, and a later one with the last step. */
    int most = 2 + (int)((t1 - t0) / 0.5);
    cr_assert(n >= 2 && n <= most, "%d PATCHes for %ld steps in %.2f s (at most %d)", n, step,
              t1 - t0, most);
    cJSON *job = get_job(pd.admin, "rep-interval");
    cr_assert_eq(num(progress_of(job), "step"), (double)step, "the newest progress is the last");
    cJSON_Delete(job);
    pod_free(&pd);
}

Test(report, a_stored_checkpoint_is_written_at_once_not_at_the_next_interval)
{
    pod pd;
    pod_for(&pd, "rep-ckpt", 1, 1);
    report *r = report_from_env(&(report_options){.interval_s = 3600, .sa_dir = pd.dir});
    cr_assert(r);
    report_info p = info(10);
    report_progress(r, &p); /* the first write goes out at once */
    p = info(20);
    report_progress(r, &p); /* this one waits for the interval */
    p = info(50);
    p.last_checkpoint_step = 50;
    snprintf(p.last_checkpoint_uri, sizeof p.last_checkpoint_uri, "s3://b/run/step-000000050");
    report_checkpoint(r, &p);
    int seen = 0;
    for (int i = 0; i < 600 && !seen; i++) {
        cJSON *job = get_job(pd.admin, "rep-ckpt");
        const cJSON *c = cJSON_GetObjectItem(progress_of(job), "lastCheckpointStep");
        seen = cJSON_IsNumber(c) && c->valuedouble == 50;
        cJSON_Delete(job);
        if (!seen) sleep_ms(50);
    }
    cr_assert(seen, "checkpoint step 50 written within 30 s with a 3600 s interval");
    report_free(r);
    pod_free(&pd);
}

Test(report, a_refused_write_is_logged_once_per_interval_with_code_and_message_never_the_token)
{
    pod pd;
    pod_for(&pd, "rep-denied", 1, 0); /* an identity without the Role */
    char logp[300];
    snprintf(logp, sizeof logp, "%s/stderr", pd.dir);
    int saved = capture_stderr(logp);
    double t0 = mono_seconds();
    report *r = report_from_env(
        &(report_options){.interval_s = 0.5, .final_timeout_s = FINAL_S, .sa_dir = pd.dir});
    /* steps go on for 1.6 s and until the writes were refused three times
     * (the first at once, then each an interval after the one before) */
    long step = 0;
    struct failed_at_least three = {r, 3};
    while (mono_seconds() - t0 < 1.6 || !has_failed(&three)) {
        cr_assert(mono_seconds() - t0 < 40, "three refused writes in 40 s (%ld so far)",
                  report_failed(r));
        report_info p = info(++step);
        report_progress(r, &p);
        if (step % 100 == 0) report_checkpoint(r, &p); /* checkpoints do not log more often */
        sleep_ms(1);
    }
    report_free(r);
    double t1 = mono_seconds();
    restore_stderr(saved);
    char *log = read_text(logp);
    cr_assert(r, "on");
    /* attempts are an interval apart, from the end of the one before; one
     * more at exit */
    int n = atomic_load(&patches), most = 2 + (int)((t1 - t0) / 0.5);
    cr_assert(n >= 4 && n <= most, "%d attempts in %.2f s (at most %d)", n, t1 - t0, most);
    int lines = count_lines_with(log, "event=report_failed");
    cr_assert_eq(lines, n, "one line per attempt: %d for %d:\n%s", lines, n, log);
    cr_assert(strstr(log, "code=403"), "the HTTP status: %s", log);
    cr_assert(strstr(log, "cannot patch resource \\\"vitjobs/status\\\"") ||
                  strstr(log, "cannot patch resource"),
              "the server's message: %s", log);
    cr_assert_null(strstr(log, pd.token), "never the token");
    cJSON *job = get_job(pd.admin, "rep-denied");
    cr_assert_null(progress_of(job), "nothing written");
    cJSON_Delete(job);
    free(log);
    pod_free(&pd);
}

Test(report, a_write_to_a_missing_job_is_logged_with_404_and_retried_at_the_next_interval)
{
    pod pd;
    pod_for(&pd, "rep-missing", 1, 1);
    kube_status st; /* the job is deleted; its identity stays a while */
    cr_assert_eq(kube_delete(pd.admin, VJ_PATH "/rep-missing", -1, NULL, NULL, &st), KUBE_OK,
                 "%s", st.message);
    for (int i = 0; i < 600 && kube_get(pd.admin, VJ_PATH "/rep-missing", NULL, &st) == KUBE_OK;
         i++)
        sleep_ms(50);
    cr_assert_eq(st.http_code, 404);
    char logp[300];
    snprintf(logp, sizeof logp, "%s/stderr", pd.dir);
    int saved = capture_stderr(logp);
    double t0 = mono_seconds();
    report *r = report_from_env(
        &(report_options){.interval_s = 0.4, .final_timeout_s = FINAL_S, .sa_dir = pd.dir});
    report_info p = info(1);
    report_progress(r, &p); /* handed over once: retried without new progress */
    struct failed_at_least three = {r, 3};
    cr_assert(wait_until(has_failed, &three, 40), "three attempts in 40 s (%ld)",
              report_failed(r));
    report_free(r);
    double t1 = mono_seconds();
    restore_stderr(saved);
    char *log = read_text(logp);
    int n = atomic_load(&patches), most = 2 + (int)((t1 - t0) / 0.4);
    cr_assert(n >= 4 && n <= most, "%d attempts in %.2f s at 0.4 s (at most %d)", n, t1 - t0,
              most);
    int lines = count_lines_with(log, "code=404 reason=NotFound");
    cr_assert_eq(lines, n, "one line per attempt (and the final one): %d for %d\n%s", lines, n,
                 log);
    free(log);
    pod_free(&pd);
}

Test(report, handing_over_returns_at_once_while_the_server_hangs_and_exit_waits_a_bounded_time)
{
    char dir[256];
    make_tmpdir(dir, sizeof dir);
    int port, s = loopback_listener(&port); /* connects, never accepted: no answer */
    pod_env(dir, "some-token", port, "rep-hang");
    report *r = report_from_env(
        &(report_options){.interval_s = 0.2, .request_timeout_s = 30, .final_timeout_s = 1,
                          .sa_dir = dir});
    cr_assert(r);
    report_info p = info(1);
    report_progress(r, &p); /* the first write goes out at once, and hangs */
    cr_assert(wait_until(connection_pending, &s, 20), "the first write never connected");
    for (long step = 2; step <= 2000; step++) {
        p = info(step);
        if (step % 50 == 0) report_checkpoint(r, &p);
        else report_progress(r, &p);
    }
    /* the write hangs until the client gives up on the TLS handshake
     * (its connect timeout, 10 s): had a hand-over waited for it, the
     * write would have ended (failed) by now */
    cr_assert_eq(report_failed(r), 0, "2000 hand-overs returned while the write was unanswered");
    cr_assert_eq(report_sent(r), 0);
    char logp[300];
    snprintf(logp, sizeof logp, "%s/stderr", dir);
    int saved = capture_stderr(logp);
    double a = mono_seconds();
    report_free(r);
    double waited = mono_seconds() - a;
    restore_stderr(saved);
    char *log = read_text(logp);
    cr_assert_geq(waited, 0.99, "exit waited %.2f s for the write (final_timeout_s 1)", waited);
    cr_assert(strstr(log, "event=final_report_abandoned"),
              "exit left the unanswered write behind: %s", log);
    free(log);
    close(s);
    /* a stopped server (connection refused): the write fails, and exit
     * does not wait for anything */
    s = loopback_listener(&port);
    close(s);
    pod_env(dir, "some-token", port, "rep-hang");
    r = report_from_env(&(report_options){.interval_s = 0.2, .final_timeout_s = 1, .sa_dir = dir});
    cr_assert(r);
    for (long step = 1; step <= 100; step++) {
        p = info(step);
        report_progress(r, &p);
    }
    struct failed_at_least one = {r, 1};
    cr_assert(wait_until(has_failed, &one, 20), "a refused connection is a failed write");
    report_free(r);
    rm_rf(dir);
}

Test(report, the_final_state_is_written_at_exit_without_waiting_for_the_interval)
{
    pod pd;
    pod_for(&pd, "rep-final", 1, 1);
    report *r = report_from_env(
        &(report_options){.interval_s = 3600, .final_timeout_s = FINAL_S, .sa_dir = pd.dir});
    cr_assert(r);
    report_info p = info(1);
    report_progress(r, &p);
    cr_assert(wait_until(one_patch, NULL, 30), "the first write at once");
    cr_assert_eq(atomic_load(&patches), 1);
    for (long step = 2; step <= 1000; step++) {
        p = info(step);
        report_progress(r, &p);
    }
    cr_assert_eq(atomic_load(&patches), 1, "the rest wait for the interval");
    report_free(r); /* had it waited for the interval, it would give up at FINAL_S */
    cr_assert_eq(atomic_load(&patches), 2, "one final write");
    cJSON *job = get_job(pd.admin, "rep-final");
    cr_assert_eq(num(progress_of(job), "step"), 1000, "the final state");
    cr_assert_eq(num(progress_of(job), "etaSeconds"), 0);
    cJSON_Delete(job);
    pod_free(&pd);
}
