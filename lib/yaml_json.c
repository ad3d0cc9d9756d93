/* lib/yaml_json.c - see yaml_json.h.
 *
 * Owns: the libyaml event loop that builds the tree, scalar resolution and
 * anchors.
 * Must not: know what the document means.
 */
#include "yaml_json.h"

#include "util.h"

#include <yaml.h>

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 128
#define MAX_ANCHORS 256

typedef struct {
    cJSON *node; /* borrowed: owned by the tree */
    char *key;   /* pending mapping key, owned */
    char *anchor;/* &name of this container, owned; recorded when it closes */
} frame;

typedef struct {
    char *name;
    cJSON *node; /* borrowed: owned by the tree */
} anchor;

typedef struct {
    const yaml_json_opts *o;
    char *err;
    size_t errlen;
    frame stack[MAX_DEPTH];
    int depth;
    anchor anchors[MAX_ANCHORS];
    int n_anchors;
    cJSON *root;
} state;

static int fail_at(state *s, const yaml_mark_t *m, const char *problem)
{
    err_printf(s->err, s->errlen, "invalid YAML at line %zu column %zu: %s", m->line + 1,
               m->column + 1, problem);
    return -1;
}

static int oom(state *s)
{
    err_printf(s->err, s->errlen, "out of memory while reading YAML");
    return -1;
}

static int in_list(const char *const *list, const char *v)
{
    for (; *list; list++)
        if (strcmp(*list, v) == 0)
            return 1;
    return 0;
}

/* A scalar as YAML 1.1 resolves it: plain ones may be null, bool or number. */
static cJSON *typed_scalar(const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    const char *tag = (const char *)ev->data.scalar.tag;
    int plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (tag) /* !!str, "!" and custom tags: a string; the core tags resolve as plain */
        plain = plain && (strcmp(tag, YAML_INT_TAG) == 0 || strcmp(tag, YAML_FLOAT_TAG) == 0 ||
                          strcmp(tag, YAML_BOOL_TAG) == 0 || strcmp(tag, YAML_NULL_TAG) == 0);
    if (!plain)
        return cJSON_CreateString(v);

    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                        "on", "On", "ON", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", "no", "No", "NO",
                                         "off", "Off", "OFF", NULL};
    static const char *const infs[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", NULL};
    static const char *const ninfs[] = {"-.inf", "-.Inf", "-.INF", NULL};
    static const char *const nans[] = {".nan", ".NaN", ".NAN", NULL};
    double d;
    if (in_list(nulls, v))
        return cJSON_CreateNull();
    if (in_list(trues, v))
        return cJSON_CreateTrue();
    if (in_list(falses, v))
        return cJSON_CreateFalse();
    if (in_list(infs, v))
        return cJSON_CreateNumber(HUGE_VAL);
    if (in_list(ninfs, v))
        return cJSON_CreateNumber(-HUGE_VAL);
    if (in_list(nans, v))
        return cJSON_CreateNumber(NAN);
    /* 0123 is octal to YAML 1.1 (kubectl, PyYAML) and decimal to YAML 1.2:
     * ambiguous, so it stays a string and fails any type check. */
    const char *q = v + (*v == '+' || *v == '-');
    if (q[0] == '0' && isdigit((unsigned char)q[1]) && !strpbrk(q, ".eE"))
        return cJSON_CreateString(v);
    if (parse_decimal(v, &d) == 0)
        return cJSON_CreateNumber(d);
    return cJSON_CreateString(v);
}

static int remember(state *s, const yaml_mark_t *at, const char *name, cJSON *node)
{
    if (s->n_anchors == MAX_ANCHORS)
        return fail_at(s, at, "too many anchors");
    char *n = strdup(name);
    if (!n)
        return oom(s);
    s->anchors[s->n_anchors].name = n;
    s->anchors[s->n_anchors++].node = node;
    return 0;
}

/* Hangs node under the innermost open container (or makes it the root).
 * Takes ownership of node in every case. */
static int attach(state *s, cJSON *node)
{
    if (node == NULL)
        return oom(s);
    if (s->depth == 0) {
        s->root = node;
        return 0;
    }
    frame *top = &s->stack[s->depth - 1];
    cJSON_bool ok;
    if (cJSON_IsArray(top->node)) {
        ok = cJSON_AddItemToArray(top->node, node);
    } else {
        ok = cJSON_AddItemToObject(top->node, top->key, node);
        free(top->key);
        top->key = NULL;
    }
    if (!ok) {
        cJSON_Delete(node);
        return oom(s);
    }
    return 0;
}

static int on_event(state *s, const yaml_event_t *ev, int *docs, int *done)
{
    const yaml_mark_t *at = &ev->start_mark;
    frame *top = s->depth > 0 ? &s->stack[s->depth - 1] : NULL;
    int want_key = top && cJSON_IsObject(top->node) && top->key == NULL;
    switch (ev->type) {
    case YAML_STREAM_END_EVENT:
        *done = 1;
        return 0;
    case YAML_DOCUMENT_START_EVENT:
        return ++*docs > 1 ? fail_at(s, at, "a config holds one document, found a second one") : 0;
    case YAML_ALIAS_EVENT: {
        if (!s->o->aliases)
            return fail_at(s, at, "aliases (*name) are not supported; write the value out");
        const char *name = (const char *)ev->data.alias.anchor;
        for (int i = s->n_anchors - 1; i >= 0; i--)
            if (strcmp(s->anchors[i].name, name) == 0) {
                if (want_key)
                    return fail_at(s, at, "mapping keys must be plain scalars");
                return attach(s, cJSON_Duplicate(s->anchors[i].node, 1));
            }
        return fail_at(s, at, "an alias names no anchor before it");
    }
    case YAML_SCALAR_EVENT: {
        const char *v = (const char *)ev->data.scalar.value;
        if (strlen(v) != ev->data.scalar.length)
            return fail_at(s, at, "a scalar contains a NUL byte");
        if (want_key) {
            top->key = strdup(v);
            return top->key ? 0 : oom(s);
        }
        cJSON *node = s->o->typed_scalars ? typed_scalar(ev) : cJSON_CreateString(v);
        const char *anchor_name = (const char *)ev->data.scalar.anchor;
        if (attach(s, node) != 0)
            return -1;
        return anchor_name && s->o->aliases ? remember(s, at, anchor_name, node) : 0;
    }
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT: {
        if (want_key)
            return fail_at(s, at, "mapping keys must be plain scalars");
        if (s->depth == MAX_DEPTH)
            return fail_at(s, at, "nesting is too deep");
        cJSON *node = ev->type == YAML_MAPPING_START_EVENT ? cJSON_CreateObject()
                                                           : cJSON_CreateArray();
        if (attach(s, node) != 0)
            return -1;
        const char *anchor_name = ev->type == YAML_MAPPING_START_EVENT
                                      ? (const char *)ev->data.mapping_start.anchor
                                      : (const char *)ev->data.sequence_start.anchor;
        frame *f = &s->stack[s->depth++];
        f->node = node;
        f->key = NULL;
        f->anchor = NULL;
        if (anchor_name && s->o->aliases && (f->anchor = strdup(anchor_name)) == NULL)
            return oom(s);
        return 0;
    }
    case YAML_MAPPING_END_EVENT:
    case YAML_SEQUENCE_END_EVENT: {
        frame *f = &s->stack[--s->depth];
        free(f->key);
        f->key = NULL;
        int rc = f->anchor ? remember(s, at, f->anchor, f->node) : 0;
        free(f->anchor);
        f->anchor = NULL;
        return rc;
    }
    default:
        return 0;
    }
}

int yaml_json_parse(const char *text, size_t len, const yaml_json_opts *opts, cJSON **out,
                    char *err, size_t errlen)
{
    static const yaml_json_opts dflt = {1, 0};
    state *s = calloc(1, sizeof *s);
    if (!s) {
        err_printf(err, errlen, "out of memory while reading YAML");
        return -1;
    }
    s->o = opts ? opts : &dflt;
    s->err = err;
    s->errlen = errlen;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        free(s);
        err_printf(err, errlen, "cannot initialize the YAML parser");
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int docs = 0, done = 0, rc = 0;
    while (!done && rc == 0) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = fail_at(s, &parser.problem_mark, parser.problem ? parser.problem : "syntax error");
            break;
        }
        rc = on_event(s, &ev, &docs, &done);
        yaml_event_delete(&ev);
    }
    while (s->depth > 0) {
        s->depth--;
        free(s->stack[s->depth].key);
        free(s->stack[s->depth].anchor);
    }
    for (int i = 0; i < s->n_anchors; i++)
        free(s->anchors[i].name);
    yaml_parser_delete(&parser);
    if (rc == 0)
        *out = s->root;
    else
        cJSON_Delete(s->root);
    free(s);
    return rc;
}
