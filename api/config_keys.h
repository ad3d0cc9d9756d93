/* api/config_keys.h - the config key table's row type, shared by the rows
 * (api/config_keys.c) and the engine that walks them (api/config.c,
 * api/config_load.c).
 *
 * Owns: what a row says of a key (config_key: its dotted path, type, field,
 * bounds, default and the words that document it), what a model preset's
 * row says (preset_def), and the declarations of the tables that
 * api/config_keys.c defines.
 * Must not: hold a row (they are api/config_keys.c's), or be included outside
 * api/config*.c: everyone else asks config.h (config_describe,
 * config_enum_name, config_preset).
 */
#ifndef VITJOB_CONFIG_KEYS_H
#define VITJOB_CONFIG_KEYS_H

#include <stddef.h>

#include "config.h"

enum key_type {
    KT_INT,    /* int */
    KT_LONG,   /* long */
    KT_U64,    /* unsigned long long */
    KT_DOUBLE, /* double */
    KT_BOOL,   /* int, 0 or 1; needs a real boolean */
    KT_STRING, /* char[]; any string that fits */
    KT_ENUM,   /* an enum field; its value is the index of its spelling in `choices` */
    KT_PAIR,   /* two doubles (off, off2) given as a 2-element array */
    KT_VEC,    /* double[] at off, 1 to `items` of them, their count an int at off2 (0 =
                * not given: the field's documented default); null = not given */
    KT_PRESET, /* char[] model.preset; setting it applies the preset */
    KT_STRS,   /* char[items][size / items] at off, 0 to `items` non-empty strings, their
                * count an int at off2 (training.freeze) */
};

enum { OPEN_MIN = 1, OPEN_MAX = 2 }; /* bound excluded: (min, ...  or ..., max) */

/* Where a key's default comes from. */
enum default_from {
    DEF_KEY,    /* the row's own value; the CRD's schema default too */
    DEF_PRESET, /* the default preset's value (model dims): the CRD has no default, which
                 * would override whatever preset a spec names */
    DEF_UNSET,  /* the zero value ("" = none); the CRD has no default: unset means none */
    DEF_FOLLOWS,/* the row's own value, adapted by config_finish (api/config.c) to the keys
                 * it follows when the spec leaves it unset (warmupSteps to steps, ...); the
                 * CRD has no default, which the API server would fill in before its rules
                 * between keys run; `dflt_words` says how it follows */
};

typedef struct {
    enum default_from from;
    double num, num2; /* numbers, booleans, an enum's value; KT_PAIR: both */
    const char *str;  /* KT_STRING, KT_PRESET */
} key_default;

typedef struct {
    const char *path;  /* dotted camelCase, relative to the spec */
    enum key_type type;
    size_t off;        /* offsetof(vit_job_config, field) */
    size_t size;       /* sizeof the field (string capacity including NUL) */
    size_t off2;       /* KT_PAIR: the second double; KT_VEC: the int count */
    int items;         /* KT_VEC: at most this many numbers (the array's length) */
    double min, max;   /* numbers only; inclusive unless `open` says otherwise */
    unsigned open;
    const char *const *choices; /* KT_ENUM: NULL-terminated */
    key_default dflt;
    /* The documentation (api/config_schema.c writes it into the CRD and the
     * README): `help` is the CRD's description, which `kubectl explain` shows
     * (the generator adds "Default X."); `readme` the README's meaning column;
     * `kind` what the README's type column says where the type says too
     * little ("path", "URL"; else it is derived from type and bounds);
     * `pattern` a CRD-only regular expression; `item_help` the description of
     * each element of a KT_PAIR or KT_VEC; `dflt_words` what the README's
     * default column says where the default is not a value of the key (a
     * KT_VEC left unset). */
    const char *help, *readme, *kind, *pattern, *item_help, *dflt_words;
    int all_items;     /* KT_VEC: 1 = exactly `items` numbers when given (an optional pair) */
} config_key;

/* A KT_PAIR's or KT_VEC's numbers: at most this many (a KT_VEC's field longer
 * than this fails the build, api/config_keys.c's ROW_VEC) */
#define NUMS_MAX 3

/* The keys, in table order (model.preset first: its default fills the model
 * dims that come from it); at most CONFIG_KEYS_MAX of them (the build fails
 * beyond). */
#define CONFIG_KEYS_MAX 256
extern const config_key config_keys[];
extern const size_t config_n_keys;

typedef struct {
    const char *name;
    int image_size, patch_size, channels, dim, depth, heads;
    double mlp_ratio;
    int num_classes;
} preset_def;

/* The model presets, config_n_presets of them. */
extern const preset_def config_presets[];
extern const size_t config_n_presets;

/* Spec keys that belong to the operator: accepted and ignored by the worker
 * (NULL-terminated). */
extern const char *const config_operator_keys[];
/* Manifest keys around the spec: ignored (NULL-terminated). */
extern const char *const config_manifest_keys[];

#endif
