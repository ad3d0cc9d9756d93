/* tests/test_lostpeer.c - worker/train/lostpeer.c: status.lostPeer of a
 * verdict (pod indices, evidence, time, message), written through the
 * in-cluster configuration to the test API server (tests/cluster/apiserver)
 * with the project's CRD, which must carry it or the server prunes it; off
 * outside Kubernetes; a refused write logged and not fatal; the verdict
 * handler's line, report and exit (peer_lost's code, the exit line last even
 * while another thread logs), and nothing written for a stale verdict. */
#define KUBE_FIXTURE_SERVER
#include "kube_fixture.h"

#include <stdatomic.h>

#include "contract.h"
#include "exitcode.h"
#include "file.h"
#include "lostpeer.h"
#include "timefmt.h"
#include "yaml_json.h"


TestSuite(lostpeer, .timeout = 60);

#include "job_fixture.h"

static cJSON *lost_peer_of(kube_client *c, const char *name)
{
    cJSON *o = get_job(c, name);
    cJSON *lp = cJSON_DetachItemFromObjectCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(o, "status"), "lostPeer");
    cJSON_Delete(o);
    return lp;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(x), "%s is not a number", key);
    return x->valuedouble;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsString(x), "%s is not a string", key);
    return x->valuestring;
}

/* The whole file (the chatter makes it megabytes); the caller frees. */
static char *read_all(const char *path)
{
    buf b = {0};
    char err[ERRLEN];
    cr_assert_eq(file_read(&b, path, err, sizeof err), 0, "%s", err);
    char *t = malloc(b.len + 1);
    cr_assert(t);
    memcpy(t, b.data, b.len);
    t[b.len] = '\0';
    buf_free(&b);
    return t;
}

/* rank 3 (pod index 1 of 2 local ranks each) silent for 5.04 s, seen by rank 0 */
static const hb_verdict silent3 = {.kind = HB_LOST, .self = 0, .rank = 3,
                                   .evidence = HB_EVIDENCE_HEARTBEAT, .noticed_by = 0,
                                   .silent_s = 5.04};
static const lostpeer_ctx rank0 = {.rank = 0, .local_ranks = 2, .generation = 3};

Test(lostpeer, the_info_names_pod_indices_the_evidence_and_when)
{
    lostpeer_info in;
    long long before = (long long)time(NULL), t;
    lostpeer_info_of(&in, &rank0, &silent3);
    cr_assert_eq(in.generation, 3);
    cr_assert_eq(in.rank, 1, "process rank 3 / 2 local ranks");
    cr_assert_eq(in.reported_by, 0);
    cr_assert_str_eq(in.evidence, "heartbeat");
    cr_assert_str_eq(in.message, "rank 3 (pod index 1): no heartbeat for 5.0 s");
    cr_assert_eq(timefmt_parse(in.time, &t), 0, "RFC 3339: %s", in.time);
    cr_assert(t >= before - 1 && t <= (long long)time(NULL) + 1);
    cr_assert_eq(in.time[strlen(in.time) - 1], 'Z', "UTC: %s", in.time);

    hb_verdict closed = {.kind = HB_LOST, .self = 5, .rank = 0,
                         .evidence = HB_EVIDENCE_CLOSED, .noticed_by = 5};
    lostpeer_ctx rank5 = {.rank = 5, .local_ranks = 2, .generation = 0};
    lostpeer_info_of(&in, &rank5, &closed);
    cr_assert_eq(in.rank, 0);
    cr_assert_eq(in.reported_by, 2);
    cr_assert_str_eq(in.evidence, "closed");
    cr_assert_str_eq(in.message, "rank 0 (pod index 0): its connection closed");
}

Test(lostpeer, the_patch_is_a_merge_patch_of_status_lostPeer_alone)
{
    lostpeer_info in;
    lostpeer_info_of(&in, &rank0, &silent3);
    cJSON *p = lostpeer_patch(&in);
    cr_assert(p);
    cr_assert_eq(cJSON_GetArraySize(p), 1);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "status");
    cr_assert_eq(cJSON_GetArraySize(st), 1, "status.lostPeer only");
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(st, "lostPeer");
    cr_assert_eq(cJSON_GetArraySize(lp), 6);
    cr_assert_eq(num(lp, "generation"), 3);
    cr_assert_eq(num(lp, "rank"), 1);
    cr_assert_eq(num(lp, "reportedBy"), 0);
    cr_assert_str_eq(str(lp, "evidence"), "heartbeat");
    cr_assert_str_eq(str(lp, "time"), in.time);
    cr_assert_str_eq(str(lp, "message"), in.message);
    cJSON_Delete(p);
}

Test(lostpeer, the_exit_message_names_the_lost_rank_last)
{
    char m[600];
    lostpeer_exit_message(m, sizeof m, &rank0, &silent3);
    cr_assert_str_eq(m, "rank 3 (pod index 1) lost: no heartbeat for 5.0 s while its connection "
                        "stayed open (evidence heartbeat); lost: rank 3");
    hb_verdict told = {.kind = HB_LOST, .self = 2, .rank = 0, .evidence = HB_EVIDENCE_CLOSED,
                       .noticed_by = 2};
    lostpeer_ctx two = {.rank = 2, .local_ranks = 1};
    lostpeer_exit_message(m, sizeof m, &two, &told);
    cr_assert_str_eq(m, "rank 0 (pod index 0) lost: its connection closed (evidence closed); "
                        "lost: rank 0 (the rendezvous store's)");
    told.rank = 1;
    told.noticed_by = 0;
    lostpeer_exit_message(m, sizeof m, &two, &told);
    cr_assert(strstr(m, "(evidence closed, noticed by rank 0); lost: rank 1"), "%s", m);
    hb_verdict st = {.kind = HB_STALE, .self = 2, .rank = 2, .silent_s = 61.23, .told = 1};
    lostpeer_exit_message(m, sizeof m, &two, &st);
    cr_assert(strstr(m, "rank 2 (pod index 2) went unanswered for 61.2 s and rank 0 declared "
                        "it lost"), "%s", m);
    cr_assert(strstr(m, "without writing a checkpoint, a status or a rendezvous key"), "%s", m);
}

Test(lostpeer, the_report_lands_in_the_status_with_every_field_and_keeps_the_rest)
{
    pod pd;
    pod_for(&pd, "lp-fields", 2, 1);
    operator_status(&pd, "lp-fields", "{\"phase\":\"Running\",\"restarts\":3}");
    lostpeer_ctx c = rank0;
    c.sa_dir = pd.dir;
    lostpeer_info in;
    lostpeer_info_of(&in, &c, &silent3);
    cr_assert_eq(lostpeer_report(&in, &c), 1, "written");
    cr_assert_eq(atomic_load(&patches), 1);
    cJSON *lp = lost_peer_of(pd.admin, "lp-fields");
    cr_assert(lp, "status.lostPeer is on the server (the CRD's schema keeps it)");
    cr_assert_eq(num(lp, "generation"), 3);
    cr_assert_eq(num(lp, "rank"), 1);
    cr_assert_eq(num(lp, "reportedBy"), 0);
    cr_assert_str_eq(str(lp, "evidence"), "heartbeat");
    cr_assert_str_eq(str(lp, "time"), in.time);
    cr_assert_str_eq(str(lp, "message"), "rank 3 (pod index 1): no heartbeat for 5.0 s");
    cJSON_Delete(lp);
    cJSON *job = get_job(pd.admin, "lp-fields");
    cr_assert_str_eq(str_at(job, "status", "phase"), "Running", "the operator's fields stay");
    cJSON_Delete(job);
    pod_free(&pd);
}

Test(lostpeer, the_crd_refuses_an_evidence_it_does_not_know)
{
    pod pd;
    pod_for(&pd, "lp-enum", 2, 1);
    lostpeer_ctx c = rank0;
    c.sa_dir = pd.dir;
    lostpeer_info in;
    lostpeer_info_of(&in, &c, &silent3);
    snprintf(in.evidence, sizeof in.evidence, "rumour");
    cr_assert_eq(lostpeer_report(&in, &c), -1, "the schema's enum refuses it");
    cJSON *lp = lost_peer_of(pd.admin, "lp-enum");
    cr_assert_null(lp);
    pod_free(&pd);
}

Test(lostpeer, outside_kubernetes_nothing_is_written)
{
    unsetenv("KUBERNETES_SERVICE_HOST");
    kube_set_observer(count_patches, NULL);
    lostpeer_info in;
    lostpeer_info_of(&in, &rank0, &silent3);
    cr_assert_eq(lostpeer_report(&in, &rank0), 0);
    cr_assert_eq(atomic_load(&patches), 0);
    kube_set_observer(NULL, NULL);
}

Test(lostpeer, a_refused_write_is_logged_and_not_fatal)
{
    pod pd;
    pod_for(&pd, "lp-refused", 2, 0);
    lostpeer_ctx c = rank0;
    c.sa_dir = pd.dir;
    lostpeer_info in;
    lostpeer_info_of(&in, &c, &silent3);
    char path[300];
    snprintf(path, sizeof path, "%s/log", pd.dir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    int rc = lostpeer_report(&in, &c);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    cr_assert_eq(rc, -1);
    char *log = read_all(path);
    cr_assert(strstr(log, "event=lost_peer_report_failed job=default/lp-refused code=403"),
              "%s", log);
    free(log);
    pod_free(&pd);
}

/* The handler in a child (it exits): its stderr in dir/child.log; with
 * talk, another thread logs all the while. Asserts that it exited with
 * peer_lost's code; returns that log (caller frees). */
static void *chatter(void *arg)
{
    (void)arg;
    for (long i = 0;; i++) LOG_INFO("test", "event=chatter i=%ld", i);
    return NULL;
}

static char *run_handler(const char *dir, const lostpeer_ctx *c, const hb_verdict *v, int talk)
{
    char path[300];
    snprintf(path, sizeof path, "%s/child.log", dir);
    pid_t p = fork();
    cr_assert(p >= 0);
    if (p == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        close(fd);
        pthread_t t;
        if (talk) {
            pthread_create(&t, NULL, chatter, NULL);
            sleep_ms(50);
        }
        lostpeer_on_verdict((void *)c, v);
        _exit(99); /* never */
    }
    int s;
    cr_assert_eq(waitpid(p, &s, 0), p);
    cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == vj_exit_code(VJ_ERR_PEER_LOST, 0),
              "status %d", s);
    return read_all(path);
}

static const char *last_line(char *text)
{
    size_t n = strlen(text);
    while (n > 0 && text[n - 1] == '\n') text[--n] = '\0';
    char *nl = strrchr(text, '\n');
    return nl ? nl + 1 : text;
}

Test(lostpeer, the_handler_reports_a_loss_it_noticed_and_exits_peer_lost_with_the_last_line)
{
    pod pd;
    pod_for(&pd, "lp-exit", 2, 1);
    lostpeer_ctx c = rank0;
    c.sa_dir = pd.dir;
    char *log = run_handler(pd.dir, &c, &silent3, 1);
    cr_assert(strstr(log, "event=peer_lost rank=3 pod=1 evidence=heartbeat noticed_by=0 "
                          "silent_s=5.0 generation=3"), "%s", last_line(log));
    cr_assert(strstr(log, "event=lost_peer_reported job=default/lp-exit rank=1"));
    const char *last = last_line(log);
    cr_assert(strstr(last, "level=error comp=worker exit_code=1 class=peer_lost retried=yes "
                           "msg=\"rank 3 (pod index 1) lost:"), "the exit line is last, not: %s",
              last);
    cr_assert(strstr(last, "; lost: rank 3\""), "%s", last);
    free(log);
    cJSON *lp = lost_peer_of(pd.admin, "lp-exit");
    cr_assert(lp, "status.lostPeer written before the exit");
    cr_assert_str_eq(str(lp, "evidence"), "heartbeat");
    cJSON_Delete(lp);
    pod_free(&pd);
}

Test(lostpeer, a_loss_rank_0_told_of_and_a_stale_verdict_write_no_status)
{
    pod pd;
    pod_for(&pd, "lp-quiet", 2, 1);
    lostpeer_ctx c = {.rank = 1, .local_ranks = 1, .generation = 2, .sa_dir = pd.dir};
    hb_verdict told = {.kind = HB_LOST, .self = 1, .rank = 2, .evidence = HB_EVIDENCE_CLOSED,
                       .noticed_by = 0};
    char *log = run_handler(pd.dir, &c, &told, 0);
    cr_assert(strstr(log, "event=peer_lost rank=2 pod=2 evidence=closed noticed_by=0"), "%s", log);
    cr_assert(!strstr(log, "lost_peer_report"), "%s", log);
    free(log);
    hb_verdict st = {.kind = HB_STALE, .self = 1, .rank = 1, .silent_s = 60};
    log = run_handler(pd.dir, &c, &st, 1);
    cr_assert(strstr(log, "event=stale rank=1 pod=1 silent_s=60.0 told=0 generation=2"), "%s",
              log);
    cr_assert(!strstr(log, "lost_peer_report"), "%s", log);
    const char *last = last_line(log);
    cr_assert(strstr(last, "exit_code=1 class=peer_lost retried=yes msg=\"rank 1 (pod index 1) "
                           "went unanswered for 60.0 s"), "%s", last);
    free(log);
    cr_assert_null(lost_peer_of(pd.admin, "lp-quiet"), "nothing written");
    pod_free(&pd);
}
