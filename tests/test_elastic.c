/* tests/test_elastic.c - operator/elastic.c's rules as a table, called
 * directly (the gang restarts that apply them are tested in test_decide.c):
 * when a shrunk job grows, by the timer (growCheckSeconds x 2^failures after
 * the last resize) or at once because a schedulable node became Ready after
 * that resize (capacity returned).
 */
#include "elastic.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#define RESIZED 1700000000LL /* the last resize (a shrink, or a growth's failure) */
#define CHECK 600            /* growCheckSeconds */

/* A 3-replica job with spec.elastic (minReplicas 2; 12 = 3 x 2 x 2 = 2 x 3 x 2:
 * both sizes allowed). The spec JSON stays alive in *doc (caller frees). */
static void mk_spec(vj_jobspec *js, cJSON **doc)
{
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"vitjob.dev/v1alpha1\",\"kind\":\"ViTJob\","
             "\"metadata\":{\"name\":\"j\",\"namespace\":\"ns\",\"uid\":\"u-1\"},"
             "\"spec\":{\"replicas\":3,\"image\":\"img:1\",\"model\":{\"preset\":\"fmnist_tiny\"},"
             "\"training\":{\"steps\":100,\"globalBatchSize\":12,\"microBatchSize\":2},"
             "\"elastic\":{\"minReplicas\":2,\"pendingTimeoutSeconds\":60,"
             "\"growCheckSeconds\":%d}}}", CHECK);
    *doc = cJSON_Parse(buf);
    cr_assert_not_null(*doc);
    char err[512];
    cr_assert_eq(vj_jobspec_parse(*doc, js, err, sizeof err), 0, "%s", err);
    cr_assert(js->elastic && js->grow_check == CHECK && js->min_replicas == 2);
}

typedef struct {
    const char *what;
    int failures;             /* elasticGrowFailures: GrowFailed in a row */
    long long node_ready_at;  /* vj_elastic_gen.node_ready_at (0 = no node information) */
    const char *node;         /* its name, or NULL */
    long long now;
    int grows;                /* expected: restarts at 3 now */
    long long requeue;        /* expected requeue_after when it waits */
    const char *says;         /* expected in the Growing message (when it grows) */
} grow_case;

static const grow_case GROW[] = {
    {"a node Ready after the resize: grows at once, naming it", 0, RESIZED + 30, "n3",
     RESIZED + 40, 1, 0, "node n3 became Ready at 2023-11-14T22:13:50Z, after the last resize "
     "at 2023-11-14T22:13:20Z"},
    {"no name: capacity returned", 0, RESIZED + 30, NULL, RESIZED + 40, 1, 0,
     "capacity returned: a node became Ready at 2023-11-14T22:13:50Z"},
    {"the node was Ready before the resize: waits for the timer", 0, RESIZED - 5, "n3",
     RESIZED + 40, 0, CHECK - 40, NULL},
    {"Ready at the resize itself: not later, waits", 0, RESIZED, "n3", RESIZED + 40, 0, CHECK - 40,
     NULL},
    {"during the backoff after GrowFailed x2, a node Ready after it: the backoff holds", 2,
     RESIZED + 100, "n3", RESIZED + 200, 0, 4 * CHECK - 200, NULL},
    {"the backoff over, with a node Ready after the failure: the timer's growth", 2,
     RESIZED + 100, "n3", RESIZED + 4 * CHECK, 1, 0, "after 2400 s at 2"},
    {"during the backoff, no new node: waits the doubled interval", 2, RESIZED - 100, "n3",
     RESIZED + 200, 0, 4 * CHECK - 200, NULL},
    {"no node information: the timer only, not yet", 0, 0, NULL, RESIZED + 40, 0, CHECK - 40, NULL},
    {"no node information: the timer grows at growCheckSeconds", 0, 0, NULL, RESIZED + CHECK, 1, 0,
     "after 600 s at 2"},
    {"the timer is due and a node is old news: the timer's words", 0, RESIZED - 5, "n3",
     RESIZED + CHECK, 1, 0, "after 600 s at 2"},
};

Test(elastic, a_shrunk_job_grows_by_the_timer_or_at_once_when_a_node_became_ready_after_the_resize)
{
    vj_jobspec js;
    cJSON *doc;
    mk_spec(&js, &doc);
    for (size_t i = 0; i < sizeof GROW / sizeof GROW[0]; i++) {
        const grow_case *t = &GROW[i];
        vj_elastic_state st = {.size = 2, .grow_from = 0, .failures = t->failures,
                               .resized = RESIZED};
        vj_elastic_gen g = {.gen = 1, .placed = 2, .running = 2, .unsched_since = -1,
                            .unsched_names = "", .cond_reason = "ShrunkUnschedulable",
                            .node_ready_at = t->node_ready_at, .node_ready_name = t->node};
        vj_elastic_verdict v;
        char err[256];
        cr_assert_eq(vj_elastic_decide(&js, &st, &g, t->now, &v, err, sizeof err), 0, "%s", err);
        if (t->grows) {
            cr_assert_eq(v.next.size, 3, "%s: grows to 3", t->what);
            cr_assert(v.grow, "%s", t->what);
            cr_assert_eq(v.next.grow_from, 2, "%s", t->what);
            cr_assert_eq(v.next.resized, t->now, "%s: the growth is the new resize", t->what);
            cr_assert_str_eq(v.reason, "Growing", "%s", t->what);
            cr_assert(strstr(v.message, t->says), "%s: %s", t->what, v.message);
            cr_assert_eq(v.requeue_after, 0, "%s", t->what);
        } else {
            cr_assert_eq(v.next.size, 2, "%s: stays at 2", t->what);
            cr_assert_not(v.grow, "%s", t->what);
            cr_assert_eq(v.requeue_after, t->requeue, "%s: requeue %lld", t->what, v.requeue_after);
        }
    }
    cJSON_Delete(doc);
}

Test(elastic, a_node_ready_does_not_grow_a_job_that_is_not_all_running_or_already_whole)
{
    vj_jobspec js;
    cJSON *doc;
    mk_spec(&js, &doc);
    vj_elastic_verdict v;
    char err[256];
    /* one of the 2 pods not running yet (a restart under way) */
    vj_elastic_state st = {.size = 2, .resized = RESIZED};
    vj_elastic_gen g = {.gen = 1, .placed = 2, .running = 1, .unsched_since = -1,
                        .unsched_names = "", .node_ready_at = RESIZED + 30, .node_ready_name = "n3"};
    cr_assert_eq(vj_elastic_decide(&js, &st, &g, RESIZED + 40, &v, err, sizeof err), 0, "%s", err);
    cr_assert_eq(v.next.size, 2);
    cr_assert_not(v.grow);
    /* at spec.replicas already */
    st.size = 3;
    g.running = 3;
    cr_assert_eq(vj_elastic_decide(&js, &st, &g, RESIZED + 40, &v, err, sizeof err), 0, "%s", err);
    cr_assert_eq(v.next.size, 3);
    cr_assert_not(v.grow);
    /* a growth being placed: the node does not start another */
    st = (vj_elastic_state){.size = 3, .grow_from = 2, .resized = RESIZED};
    g.running = 3;
    cr_assert_eq(vj_elastic_decide(&js, &st, &g, RESIZED + 40, &v, err, sizeof err), 0, "%s", err);
    cr_assert_eq(v.next.size, 3);
    cr_assert_not(v.grow);
    cr_assert_str_eq(v.reason, "Grown");
    cJSON_Delete(doc);
}
