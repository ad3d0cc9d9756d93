/* tests/test_kube_watch.c - lib/kube_watch.c: the line splitter on its own,
 * then watches against the test API server: events in order with their
 * resourceVersions, starting from the current state, bookmarks, a stop flag
 * set by a signal, 410 Gone and a server restart mid-watch. */
#define KUBE_FIXTURE_SERVER
#include "kube_fixture.h"

/* ================================================== unit: the line splitter */

typedef struct {
    char lines[16][64];
    int n;
    size_t longest;
} line_sink;

static int sink_line(const char *line, size_t len, void *user)
{
    line_sink *s = user;
    cr_assert_eq(strlen(line), len, "line is NUL-terminated at len");
    if (len > s->longest) s->longest = len;
    if (s->n < 16) snprintf(s->lines[s->n], sizeof s->lines[0], "%.*s", (int)len, line);
    s->n++;
    return 0;
}

static line_sink feed_chunks(const char *const *chunks)
{
    kube_lines *l;
    line_sink s = {0};
    cr_assert_eq(kube_lines_new(0, &l), 0);
    for (int i = 0; chunks[i]; i++)
        cr_assert_eq(kube_lines_feed(l, chunks[i], strlen(chunks[i]), sink_line, &s), 0);
    cr_assert_eq(kube_lines_pending(l), 0, "no unfinished line left");
    kube_lines_free(l);
    return s;
}

Test(kube_lines, event_split_mid_line_across_chunks_is_reassembled)
{
    const char *chunks[] = {"{\"type\":\"ADD", "ED\",\"o\":1", "}\n", NULL};
    line_sink s = feed_chunks(chunks);
    cr_assert_eq(s.n, 1);
    cr_assert_str_eq(s.lines[0], "{\"type\":\"ADDED\",\"o\":1}");
}

Test(kube_lines, several_events_in_one_chunk_come_out_in_order)
{
    const char *chunks[] = {"a1\nb22\nc333\nd", "4\n", NULL};
    line_sink s = feed_chunks(chunks);
    cr_assert_eq(s.n, 4);
    cr_assert_str_eq(s.lines[0], "a1");
    cr_assert_str_eq(s.lines[1], "b22");
    cr_assert_str_eq(s.lines[2], "c333");
    cr_assert_str_eq(s.lines[3], "d4");
}

Test(kube_lines, chunk_ending_exactly_at_newline_and_lone_newline_chunks)
{
    const char *chunks[] = {"one\n", "\n", "two", "\n", "\r\n", "three\r\n", NULL};
    line_sink s = feed_chunks(chunks);
    cr_assert_eq(s.n, 3, "blank lines are skipped");
    cr_assert_str_eq(s.lines[0], "one");
    cr_assert_str_eq(s.lines[1], "two");
    cr_assert_str_eq(s.lines[2], "three", "a trailing CR is dropped");
}

Test(kube_lines, byte_by_byte_feeding_gives_the_same_lines)
{
    const char *text = "{\"x\":1}\n{\"y\":2}\n";
    kube_lines *l;
    line_sink s = {0};
    cr_assert_eq(kube_lines_new(0, &l), 0);
    for (size_t i = 0; i < strlen(text); i++)
        cr_assert_eq(kube_lines_feed(l, text + i, 1, sink_line, &s), 0);
    kube_lines_free(l);
    cr_assert_eq(s.n, 2);
    cr_assert_str_eq(s.lines[1], "{\"y\":2}");
}

Test(kube_lines, huge_object_of_three_mebibytes_in_odd_chunks_is_one_line)
{
    size_t n = 3u << 20;
    char *big = malloc(n + 2);
    memset(big, 'x', n);
    big[n] = '\n';
    big[n + 1] = '\0';
    kube_lines *l;
    line_sink s = {0};
    cr_assert_eq(kube_lines_new(0, &l), 0);
    for (size_t off = 0; off < n + 1; off += 16381) {
        size_t len = n + 1 - off < 16381 ? n + 1 - off : 16381;
        cr_assert_eq(kube_lines_feed(l, big + off, len, sink_line, &s), 0);
    }
    kube_lines_free(l);
    free(big);
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.longest, n);
}

Test(kube_lines, line_longer_than_the_limit_is_an_error)
{
    kube_lines *l;
    line_sink s = {0};
    cr_assert_eq(kube_lines_new(8, &l), 0);
    cr_assert_eq(kube_lines_feed(l, "123456789", 9, sink_line, &s), -1);
    cr_assert_eq(kube_lines_feed(l, "ok\n", 3, sink_line, &s), 0, "usable again after the error");
    kube_lines_free(l);
    cr_assert_eq(s.n, 1);
}

static int stop_at_second(const char *line, size_t len, void *user)
{
    (void)line, (void)len;
    return ++*(int *)user == 2 ? 7 : 0;
}

Test(kube_lines, callback_nonzero_stops_feeding_and_is_returned)
{
    kube_lines *l;
    int n = 0;
    cr_assert_eq(kube_lines_new(0, &l), 0);
    cr_assert_eq(kube_lines_feed(l, "a\nb\nc\n", 6, stop_at_second, &n), 7);
    cr_assert_eq(n, 2);
    kube_lines_free(l);
}


/* ================================================ against the API server */

TestSuite(kube_watch, .timeout = 60);


Test(kube_watch, watch_delivers_added_modified_deleted_in_order_and_tracks_resource_version)
{
    kube_client *c = shared_client();
    kube_status st;
    cJSON *items = NULL;
    char rv[64];
    kube_list_opts lo = {.label_selector = "wo=1"};
    cr_assert_eq(kube_list(c, NS "/configmaps", &lo, &items, rv, sizeof rv, &st), KUBE_OK);
    cJSON_Delete(items);
    create_cm(c, "wo-1", "wo", "1");
    cJSON *p = cJSON_Parse("{\"data\":{\"k\":\"changed\"}}");
    cr_assert_eq(kube_merge_patch(c, NS "/configmaps/wo-1", p, NULL, &st), KUBE_OK);
    cJSON_Delete(p);
    cr_assert_eq(kube_delete(c, NS "/configmaps/wo-1", 0, NULL, NULL, &st), KUBE_OK);

    recorder r = {.stop_after = 3};
    kube_watch_opts wo = {.label_selector = "wo=1"};
    int rc = kube_watch_run(c, NS "/configmaps", &wo, rv, sizeof rv, record, &r, NULL, &st);
    cr_assert_eq(rc, KUBE_WATCH_STOPPED, "%d %s", rc, st.message);
    cr_assert_eq(r.n, 3);
    cr_assert_str_eq(r.types[0], "ADDED");
    cr_assert_str_eq(r.types[1], "MODIFIED");
    cr_assert_str_eq(r.types[2], "DELETED");
    cr_assert_str_eq(r.names[2], "wo-1");
    cr_assert(atol(r.rvs[0]) < atol(r.rvs[1]) && atol(r.rvs[1]) < atol(r.rvs[2]));
    cr_assert_str_eq(rv, r.rvs[2], "rv is the last delivered event's");
    kube_client_free(c);
}

static void create_next(int n, void *arg)
{
    /* Live events: each delivered event triggers the next write. */
    kube_client *c = arg;
    char name[32];
    if (n < 3) {
        snprintf(name, sizeof name, "live-%d", n);
        create_cm(c, name, "live", "1");
    }
}

Test(kube_watch, watch_from_empty_rv_starts_with_current_state_then_live_events)
{
    kube_client *c = shared_client(), *writer = shared_client();
    kube_status st;
    create_cm(c, "live-0", "live", "1");
    recorder r = {.stop_after = 3, .on_event = create_next, .arg = writer};
    char rv[64] = "";
    kube_watch_opts wo = {.label_selector = "live=1"};
    int rc = kube_watch_run(c, NS "/configmaps", &wo, rv, sizeof rv, record, &r, NULL, &st);
    cr_assert_eq(rc, KUBE_WATCH_STOPPED, "%s", st.message);
    cr_assert_str_eq(r.names[0], "live-0");
    cr_assert_str_eq(r.names[1], "live-1");
    cr_assert_str_eq(r.names[2], "live-2");
    kube_client_free(writer);
    kube_client_free(c);
}

Test(kube_watch, bookmarks_advance_the_resource_version_without_events)
{
    kube_client *c = shared_client();
    kube_status st;
    cJSON *items = NULL;
    char rv[64], before[64];
    cr_assert_eq(kube_list(c, NS "/configmaps", NULL, &items, rv, sizeof rv, &st), KUBE_OK);
    cJSON_Delete(items);
    create_cm(c, "bm-unrelated", NULL, NULL); /* moves the global rv on */
    snprintf(before, sizeof before, "%s", rv);
    recorder r = {.stop_on_bookmark = 1};
    kube_watch_opts wo = {.label_selector = "nothing-has-this"};
    int rc = kube_watch_run(c, NS "/configmaps", &wo, rv, sizeof rv, record, &r, NULL, &st);
    cr_assert_eq(rc, KUBE_WATCH_STOPPED, "%s", st.message);
    cr_assert_eq(r.bookmarks, 1);
    cr_assert_eq(r.n, 0);
    cr_assert_gt(atol(rv), atol(before), "bookmark rv %s > list rv %s", rv, before);
    kube_client_free(c);
}

static volatile sig_atomic_t alarm_stop;
static struct timespec alarm_at;
static void on_alarm(int sig)
{
    (void)sig;
    clock_gettime(CLOCK_MONOTONIC, &alarm_at); /* async-signal-safe */
    alarm_stop = 1;
}

/* The watch checks the flag at least once a second while nothing arrives;
 * the server would hold a quiet watch for its default timeout (30 minutes).
 * The bound is taken from the signal, and is far from both. */
Test(kube_watch, stop_flag_set_by_a_signal_handler_ends_a_quiet_watch_within_a_second)
{
    kube_client *c = shared_client();
    kube_status st;
    char rv[64] = "";
    recorder r = {.stop_after = 1000};
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct timespec t1;
    alarm(1);
    kube_watch_opts wo = {.label_selector = "quiet=1"};
    int rc = kube_watch_run(c, NS "/services", &wo, rv, sizeof rv, record, &r, &alarm_stop, &st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert(alarm_stop, "the watch ended before the signal: %d %s", rc, st.message);
    double secs = (double)(t1.tv_sec - alarm_at.tv_sec) + (t1.tv_nsec - alarm_at.tv_nsec) / 1e9;
    cr_assert_eq(rc, KUBE_WATCH_STOPPED, "%s", st.message);
    cr_assert_lt(secs, 30.0, "stopped %.2fs after the signal", secs);
    kube_client_free(c);
}

/* ============================== own servers: 410 Gone and restart mid-watch */


Test(kube_watch, too_old_resource_version_is_reported_as_watch_gone)
{
    char dir[256], state[300];
    int port;
    make_tmpdir(dir, sizeof dir);
    snprintf(state, sizeof state, "%s/state", dir);
    const char *extra[] = {"--history", "5", NULL};
    pid_t pid = server_start(state, 0, extra, &port);
    cr_assert(pid > 0, "server did not start");
    kube_client *c = client_for(state);
    kube_status st;
    cJSON *o = configmap("old", NULL, NULL, "0"), *got = NULL;
    cr_assert_eq(kube_create(c, NS "/configmaps", o, &got, &st), KUBE_OK, "%s", st.message);
    char rv[64];
    snprintf(rv, sizeof rv, "%s", str_at(got, "metadata", "resourceVersion"));
    cJSON_Delete(got);
    cJSON_Delete(o);
    for (int i = 0; i < 10; i++) {
        char b[64];
        snprintf(b, sizeof b, "{\"data\":{\"k\":\"%d\"}}", i);
        cJSON *p = cJSON_Parse(b);
        cr_assert_eq(kube_merge_patch(c, NS "/configmaps/old", p, NULL, &st), KUBE_OK);
        cJSON_Delete(p);
    }
    recorder r = {.stop_after = 100};
    int rc = kube_watch_run(c, NS "/configmaps", NULL, rv, sizeof rv, record, &r, NULL, &st);
    kube_client_free(c);
    server_stop(pid, SIGTERM);
    rm_rf(dir);
    cr_assert_eq(rc, KUBE_WATCH_GONE, "%d %s", rc, st.message);
    cr_assert_eq(st.http_code, 410);
    cr_assert_str_eq(st.reason, "Expired");
    cr_assert_eq(r.n, 0);
}

typedef struct {
    const char *state;
    pid_t pid;
    int port;
    kube_client *writer;
    int restarted;
} restart_ctx;

static void restart_on_first(int n, void *arg)
{
    restart_ctx *x = arg;
    if (n != 1) return;
    /* Kill the server under the open watch, bring it back on the same port,
     * and write while the watch is disconnected. */
    server_stop(x->pid, SIGKILL);
    int port = 0;
    char portarg[16];
    snprintf(portarg, sizeof portarg, "%d", x->port);
    x->pid = server_start(x->state, x->port, NULL, &port);
    cr_assert(x->pid > 0 && port == x->port, "restart on port %d failed", x->port);
    x->restarted = 1;
    create_cm(x->writer, "rs-2", "rs", "1");
    create_cm(x->writer, "rs-3", "rs", "1");
}

Test(kube_watch, watch_resumes_after_server_restart_on_the_same_port_without_losing_events)
{
    char dir[256], state[300];
    make_tmpdir(dir, sizeof dir);
    snprintf(state, sizeof state, "%s/state", dir);
    restart_ctx x = {.state = state};
    x.pid = server_start(state, 0, NULL, &x.port);
    cr_assert(x.pid > 0, "server did not start");
    kube_client *c = client_for(state);
    x.writer = client_for(state);
    kube_status st;
    cJSON *items = NULL;
    char rv[64];
    kube_list_opts lo = {.label_selector = "rs=1"};
    cr_assert_eq(kube_list(c, NS "/configmaps", &lo, &items, rv, sizeof rv, &st), KUBE_OK);
    cJSON_Delete(items);
    create_cm(c, "rs-1", "rs", "1");

    recorder r = {.stop_after = 3, .on_event = restart_on_first, .arg = &x};
    kube_watch_opts wo = {.label_selector = "rs=1", .backoff_initial_ms = 100,
                          .backoff_max_ms = 1000};
    int rc = kube_watch_run(c, NS "/configmaps", &wo, rv, sizeof rv, record, &r, NULL, &st);
    kube_client_free(c);
    kube_client_free(x.writer);
    server_stop(x.pid, SIGTERM);
    rm_rf(dir);
    cr_assert_eq(rc, KUBE_WATCH_STOPPED, "%d %s", rc, st.message);
    cr_assert(x.restarted);
    cr_assert_eq(r.n, 3);
    cr_assert_str_eq(r.names[0], "rs-1");
    cr_assert_str_eq(r.names[1], "rs-2", "the event written while disconnected arrives");
    cr_assert_str_eq(r.names[2], "rs-3");
    cr_assert_str_eq(r.types[1], "ADDED");
}
