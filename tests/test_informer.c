/* tests/test_informer.c - operator/informer.c against the test API server:
 * the list fills the cache and the watch keeps it current (ADDED, MODIFIED,
 * DELETED reach the cache and the handler); and an object deleted while the
 * watch was down (server gone, history compacted so that the watch must get
 * 410 Gone and relist) is removed from the cache AND delivered to the
 * handler as DELETED by the relist, deterministically: the informer cannot
 * see that delete any other way, since no server it can reach serves it live. */
#include "kube_fixture.h"
#include "informer.h"

#include <arpa/inet.h>

TestSuite(informer, .timeout = 90);

/* ------------------------------------------------ what the handler received */

typedef struct {
    pthread_mutex_t mu;
    int n;
    char types[64][16];
    char names[64][32];
} changes;

static void on_change(void *user, const char *type, const cJSON *obj)
{
    changes *ch = user;
    const char *name = kube_meta_str(obj, "name");
    pthread_mutex_lock(&ch->mu);
    if (ch->n < 64) {
        snprintf(ch->types[ch->n], sizeof ch->types[0], "%s", type);
        snprintf(ch->names[ch->n], sizeof ch->names[0], "%s", name ? name : "");
    }
    ch->n++;
    pthread_mutex_unlock(&ch->mu);
}

/* How many (type, name) changes were received. */
static int count(changes *ch, const char *type, const char *name)
{
    int k = 0;
    pthread_mutex_lock(&ch->mu);
    for (int i = 0; i < ch->n && i < 64; i++)
        k += strcmp(ch->types[i], type) == 0 && strcmp(ch->names[i], name) == 0;
    pthread_mutex_unlock(&ch->mu);
    return k;
}

/* Polls until (type, name) was received, up to 45 s. */
static int wait_for(changes *ch, const char *type, const char *name)
{
    for (int i = 0; i < 4500; i++) {
        if (count(ch, type, name) > 0) return 1;
        sleep_ms(10);
    }
    return 0;
}

/* The informer's clients: from a kubeconfig file (its path is the user). */
static int factory(void *user, kube_client **out, kube_status *st)
{
    char err[ERRLEN];
    kube_config *cfg = NULL;
    if (kube_config_load_kubeconfig(user, &cfg, err, sizeof err) != 0) {
        memset(st, 0, sizeof *st);
        snprintf(st->message, sizeof st->message, "%.400s", err);
        return KUBE_ERR_INVALID;
    }
    return kube_client_new(cfg, out, st);
}

static volatile sig_atomic_t stop;

static informer *start(obj_cache *cache, changes *ch, char *kubeconfig)
{
    informer_opts o = {.name = "configmaps", .path = NS "/configmaps", .label_selector = "inf=1",
                       .cache = cache, .on_change = on_change, .user = ch,
                       .factory = factory, .factory_user = kubeconfig, .stop = &stop};
    informer *inf = NULL;
    stop = 0;
    cr_assert_eq(informer_start(&o, &inf), 0);
    return inf;
}

static void delete_cm(kube_client *c, const char *name)
{
    char path[256];
    kube_status st;
    snprintf(path, sizeof path, NS "/configmaps/%s", name);
    cr_assert_eq(kube_delete(c, path, -1, NULL, NULL, &st), KUBE_OK, "delete %s: %s", name,
                 st.message);
}

static int cached(obj_cache *cache, const char *name)
{
    cJSON *o = cache_get(cache, "default", name);
    cJSON_Delete(o);
    return o != NULL;
}

/* ======================================================== list, then watch */

Test(informer, list_fills_the_cache_and_the_watch_delivers_added_modified_deleted)
{
    char dir[256], state[300], kc[320];
    int port;
    make_tmpdir(dir, sizeof dir);
    snprintf(state, sizeof state, "%s/state", dir);
    pid_t pid = server_start(state, 0, NULL, &port);
    cr_assert(pid > 0, "the test API server did not start (see %s/apiserver.log)", state);
    snprintf(kc, sizeof kc, "%s/kubeconfig", state);
    kube_client *w = client_for(state);
    create_cm(w, "before", "inf", "1");
    create_cm(w, "unlabelled", NULL, NULL);

    obj_cache *cache = cache_new();
    changes ch = {.mu = PTHREAD_MUTEX_INITIALIZER};
    informer *inf = start(cache, &ch, kc);
    int listed = wait_for(&ch, "ADDED", "before");
    int synced = informer_synced(inf);
    create_cm(w, "after", "inf", "1");
    int added = wait_for(&ch, "ADDED", "after");
    cJSON *p = cJSON_Parse("{\"data\":{\"k\":\"v2\"}}");
    kube_status st;
    cr_assert_eq(kube_merge_patch(w, NS "/configmaps/after", p, NULL, &st), KUBE_OK, "%s",
                 st.message);
    cJSON_Delete(p);
    int modified = wait_for(&ch, "MODIFIED", "after");
    delete_cm(w, "before");
    int deleted = wait_for(&ch, "DELETED", "before");
    int before_cached = cached(cache, "before"), after_cached = cached(cache, "after");
    int unlabelled_cached = cached(cache, "unlabelled");
    size_t len = cache_len(cache);
    int lists = informer_lists(inf);

    stop = 1;
    informer_join(inf);
    cache_free(cache);
    kube_client_free(w);
    server_stop(pid, SIGTERM);
    rm_rf(dir);

    cr_assert(listed, "the list did not deliver ADDED for \"before\"");
    cr_assert(synced, "synced once the first list is cached");
    cr_assert(added && modified && deleted, "watch events: added %d modified %d deleted %d",
              added, modified, deleted);
    cr_assert_not(before_cached, "a deleted object left the cache");
    cr_assert(after_cached);
    cr_assert_not(unlabelled_cached, "the label selector applies");
    cr_assert_eq(len, 1);
    cr_assert_eq(lists, 1, "no relist without a reason");
}

/* ================================ a delete missed while the watch was down */

/* A socket bound (not listening) on 127.0.0.1:port: connections to it are
 * refused, and no other server can take the port meanwhile. */
static int hold_port(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0, "bind %d: %s", port,
                 strerror(errno));
    return s;
}

Test(informer, object_deleted_while_the_watch_was_down_is_delivered_as_deleted_by_the_relist)
{
    char dir[256], state[300], kc[320], path[1024];
    int port, port2, port3;
    make_tmpdir(dir, sizeof dir);
    snprintf(state, sizeof state, "%s/state", dir);
    pid_t pid = server_start(state, 0, NULL, &port);
    cr_assert(pid > 0, "the test API server did not start (see %s/apiserver.log)", state);
    /* the informer's client keeps the first server's address: port P */
    snprintf(kc, sizeof kc, "%s/kubeconfig.first", dir);
    snprintf(path, sizeof path, "%s/kubeconfig", state);
    char *text = read_text(path);
    cr_assert(text);
    write_text(kc, text);
    free(text);
    kube_client *w = client_for(state);
    create_cm(w, "keep", "inf", "1");
    create_cm(w, "gone", "inf", "1");
    kube_client_free(w);

    obj_cache *cache = cache_new();
    changes ch = {.mu = PTHREAD_MUTEX_INITIALIZER};
    informer *inf = start(cache, &ch, kc);
    int listed = wait_for(&ch, "ADDED", "keep") && wait_for(&ch, "ADDED", "gone");

    /* The server dies; port P stays refused while a second server on another
     * port, which the informer does not know, deletes "gone" and compacts
     * the history (--history 1) past the informer's resourceVersion. */
    server_stop(pid, SIGKILL);
    int held = hold_port(port);
    const char *small[] = {"--history", "1", NULL};
    pid = server_start(state, 0, small, &port2);
    cr_assert(pid > 0 && port2 != port, "second server: pid %d port %d", (int)pid, port2);
    w = client_for(state);
    delete_cm(w, "gone");
    create_cm(w, "new", "inf", "1");
    create_cm(w, "filler", NULL, NULL);
    kube_client_free(w);
    server_stop(pid, SIGTERM);
    /* Back on port P with that state: the watch gets 410 Gone and relists. */
    close(held);
    pid = server_start(state, port, small, &port3);
    cr_assert(pid > 0 && port3 == port, "restart on port %d failed", port);

    int relisted = wait_for(&ch, "ADDED", "new"); /* only a relist can bring it */
    int deleted = count(&ch, "DELETED", "gone"), deleted_keep = count(&ch, "DELETED", "keep");
    int gone_cached = cached(cache, "gone"), keep_cached = cached(cache, "keep");
    int new_cached = cached(cache, "new");
    int lists = informer_lists(inf);

    stop = 1;
    informer_join(inf);
    cache_free(cache);
    server_stop(pid, SIGTERM);
    rm_rf(dir);

    cr_assert(listed, "the first list did not deliver both objects");
    cr_assert(relisted, "no relist brought the object created while the watch was down");
    cr_assert_geq(lists, 2, "lists: %d", lists);
    cr_assert_not(gone_cached, "the relist left the deleted object in the cache");
    cr_assert_eq(deleted, 1,
                 "the relist did not deliver DELETED for the object deleted while the watch was "
                 "down (%d times)", deleted);
    cr_assert_eq(deleted_keep, 0, "an object that still exists was reported deleted");
    cr_assert(keep_cached && new_cached);
}
