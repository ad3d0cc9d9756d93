/* api/config.c - see config.h.
 *
 * One static table (config_keys) describes every key of the config file: its
 * dotted camelCase path as in docs/design.md, its type, its bounds, its
 * default, the field it fills and the words that document it. Defaults,
 * loading a file, applying `--set key=value`, validating and printing the
 * effective config all walk that table, so a key exists in all five places or
 * in none; the CRD's schema of the key and the README's row for it are
 * written from it too (config_describe, api/config_schema.c, `make schema`).
 *
 * Documents are parsed into a cJSON tree first: JSON with cJSON, YAML with
 * libyaml's event API (plain scalars resolved as YAML 1.1 does: numbers,
 * booleans, null; quoted scalars always strings). The tree is then applied
 * to a copy of the config, which replaces the caller's only on success.
 */
#include "config.h"

#include "buf.h"
#include "file.h"
#include "log.h"
#include "randaug_spec.h"
#include "util.h"
#include "yaml_json.h"

#include <cjson/cJSON.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATH_MAX_LEN 256            /* longest dotted key we look up */
#define FILE_PATH_MAX 4096
#define FILE_MAX_BYTES (16u << 20)  /* a config larger than this is a mistake */
#define JSON_EXACT_INT 9007199254740991.0 /* 2^53 - 1: largest integer a JSON number holds exactly */

/* ------------------------------------------------------------------------ */
/* Presets                                                                   */

typedef struct {
    const char *name;
    int image_size, patch_size, channels, dim, depth, heads;
    double mlp_ratio;
    int num_classes;
} preset_def;

static const preset_def presets[] = {
    {"vit_ti16", 224, 16, 3, 192, 12, 3, 4.0, 1000},
    {"vit_s16", 224, 16, 3, 384, 12, 6, 4.0, 1000},
    {"vit_b16", 224, 16, 3, 768, 12, 12, 4.0, 1000},
    {"vit_l16", 224, 16, 3, 1024, 24, 16, 4.0, 1000},
    {"vit_h14", 224, 14, 3, 1280, 32, 16, 4.0, 1000},
    {"vit_g14", 224, 14, 3, 1408, 40, 16, 48.0 / 11.0, 1000},
    {"fmnist_tiny", 28, 7, 1, 64, 4, 4, 4.0, 10},
    {"fmnist_small", 28, 4, 1, 128, 6, 4, 4.0, 10},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

/* ------------------------------------------------------------------------ */
/* The key table                                                             */

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
};

typedef struct {
    enum default_from from;
    double num, num2; /* numbers, booleans, an enum's value; KT_PAIR: both */
    const char *str;  /* KT_STRING, KT_PRESET */
} key_default;

#define DEF_NUM(x) {DEF_KEY, (x), 0, NULL}
#define DEF_BOOL(x) {DEF_KEY, (x), 0, NULL}
#define DEF_ENUM(x) {DEF_KEY, (x), 0, NULL}
#define DEF_STR(s) {DEF_KEY, 0, 0, (s)}
#define DEF_PAIR(a, b) {DEF_KEY, (a), (b), NULL}
#define FROM_PRESET {DEF_PRESET, 0, 0, NULL}
#define UNSET {DEF_UNSET, 0, 0, NULL}

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

/* The _Generic makes the build fail when a row's type does not match its field.
 * Each row is {ROW_x(path, field, ..., default), .help = ..., .readme = ...}. */
#define FIELD_T(f, T, kt) _Generic(((vit_job_config *)0)->f, T: kt)
#define AT(f) offsetof(vit_job_config, f), sizeof(((vit_job_config *)0)->f)
#define ROW_INT(p, f, lo, hi, d) p, FIELD_T(f, int, KT_INT), AT(f), 0, 0, lo, hi, 0, NULL, d
#define ROW_LONG(p, f, lo, hi, d) p, FIELD_T(f, long, KT_LONG), AT(f), 0, 0, lo, hi, 0, NULL, d
#define ROW_U64(p, f, lo, hi, d) \
    p, FIELD_T(f, unsigned long long, KT_U64), AT(f), 0, 0, lo, hi, 0, NULL, d
#define ROW_DBL(p, f, lo, hi, open, d) p, FIELD_T(f, double, KT_DOUBLE), AT(f), 0, 0, lo, hi, open, NULL, d
#define ROW_BOOL(p, f, d) p, FIELD_T(f, int, KT_BOOL), AT(f), 0, 0, 0, 1, 0, NULL, d
#define ROW_STR(p, f, d) p, FIELD_T(f, char *, KT_STRING), AT(f), 0, 0, 0, 0, 0, NULL, d
#define ENUM_T(f)                                                                          \
    _Generic(((vit_job_config *)0)->f, data_format: KT_ENUM, interp_mode: KT_ENUM,          \
             precision_mode: KT_ENUM, sharding_mode: KT_ENUM, optimizer_kind: KT_ENUM,     \
             lr_schedule: KT_ENUM, device_kind: KT_ENUM, mixup_mode: KT_ENUM, erase_mode: KT_ENUM, init_head_mode: KT_ENUM)
#define ROW_ENUM(p, f, ch, d) p, ENUM_T(f), AT(f), 0, 0, 0, 0, 0, ch, d
#define ROW_PAIR(p, f1, f2, lo, hi, open, d) \
    p, FIELD_T(f1, double, KT_PAIR), AT(f1), FIELD_T(f2, double, offsetof(vit_job_config, f2)), 2, \
        lo, hi, open, NULL, d
/* f: a double array of at most NUMS_MAX (the build fails on a longer one);
 * fn: its int count (0 = unset, the key's default) */
#define NUMS_MAX 3
#define VEC_LEN(f) (sizeof(((vit_job_config *)0)->f) / sizeof(double))
#define ROW_VEC(p, f, fn, lo, hi, open) \
    p, FIELD_T(f, double *, KT_VEC), AT(f), FIELD_T(fn, int, offsetof(vit_job_config, fn)), \
        (int)(VEC_LEN(f) + 0 * sizeof(char[VEC_LEN(f) <= NUMS_MAX ? 1 : -1])), lo, hi, open, NULL, UNSET
#define ROW_PRESET(p, f, d) p, FIELD_T(f, char *, KT_PRESET), AT(f), 0, 0, 0, 0, 0, NULL, d
/* f: an array of strings (char[n][len]); fn: their int count (0 = none) */
#define ROW_STRS(p, f, fn)                                                                    \
    p, FIELD_T(f, char(*)[sizeof(((vit_job_config *)0)->f[0])], KT_STRS), AT(f),              \
        FIELD_T(fn, int, offsetof(vit_job_config, fn)),                                       \
        (int)(sizeof(((vit_job_config *)0)->f) / sizeof(((vit_job_config *)0)->f[0])), 0, 0, 0, \
        NULL, UNSET

static const char *const formats[] = {"fashion-mnist", "webdataset", "imagefolder", NULL};
static const char *const interpolations[] = {"bilinear", "bicubic", NULL};
static const char *const precisions[] = {"fp32", "bf16-mixed", "fp16-mixed", NULL};
static const char *const shardings[] = {"none", "grad-op", "full", NULL};
static const char *const optimizers[] = {"adamw", NULL};
static const char *const schedules[] = {"cosine", "constant", NULL};
static const char *const devices[] = {"cpu", "cuda", "auto", NULL};
static const char *const mixup_modes[] = {"batch", "pair", "elem", NULL};
static const char *const erase_modes[] = {"pixel", "const", "rand", NULL};
static const char *const init_heads[] = {"new", "keep", NULL};

/* Adding a key: a field in config.h, a row here (bounds, default, help,
 * readme), then `make schema` writes it into the CRD, the chart's copy of it
 * and the README's table (a key in a new section needs that section's object
 * and markers in the CRD first); tests/schema.bats fails until then. */
static const config_key config_keys[] = {
    {ROW_PRESET("model.preset", model.preset, DEF_STR("fmnist_tiny")), .kind = "string",
     .help = "Named model size: vit_ti16, vit_s16, vit_b16, vit_l16, vit_h14, vit_g14 (timm's "
             "dims, 224x224x3, 1000 classes), fmnist_tiny, fmnist_small (28x28x1, 10 classes). "
             "\"\" = no preset (every dimension as given).",
     .readme = "`vit_ti16`, `vit_s16`, `vit_b16`, `vit_l16`, `vit_h14`, `vit_g14` (timm's dims, "
               "224x224x3, 1000 classes), `fmnist_tiny`, `fmnist_small` (28x28x1, 10 classes); "
               "applied first, explicit keys override it"},
    {ROW_INT("model.imageSize", model.image_size, 1, 4096, FROM_PRESET),
     .help = "Input height = width in pixels (from the preset when left out; fmnist_tiny: 28). "
             "Must be divisible by patchSize; 28 for Fashion-MNIST.",
     .readme = "input height = width"},
    {ROW_INT("model.patchSize", model.patch_size, 1, 4096, FROM_PRESET),
     .help = "Side of the non-overlapping square patches (from the preset when left out; "
             "fmnist_tiny: 7).",
     .readme = "non-overlapping square patches; must divide `imageSize`"},
    {ROW_INT("model.channels", model.channels, 1, 1024, FROM_PRESET),
     .help = "Input channels (from the preset when left out; fmnist_tiny: 1). 1 for Fashion-MNIST.",
     .readme = "input channels"},
    {ROW_INT("model.dim", model.dim, 1, 65536, FROM_PRESET),
     .help = "Embedding width D (from the preset when left out; fmnist_tiny: 64). Must be "
             "divisible by heads.",
     .readme = "width; must be divisible by `heads`"},
    {ROW_INT("model.depth", model.depth, 1, 1024, FROM_PRESET),
     .help = "Number of transformer blocks (from the preset when left out; fmnist_tiny: 4).",
     .readme = "transformer blocks"},
    {ROW_INT("model.heads", model.heads, 1, 1024, FROM_PRESET),
     .help = "Attention heads per block (from the preset when left out; fmnist_tiny: 4).",
     .readme = "attention heads"},
    {ROW_DBL("model.mlpRatio", model.mlp_ratio, 0, 64, OPEN_MIN, FROM_PRESET),
     .help = "MLP hidden width = round(dim x mlpRatio); > 0 and <= 64 (from the preset when left "
             "out; 4 for all but vit_g14).",
     .readme = "MLP hidden = round(dim x mlpRatio)"},
    {ROW_INT("model.numClasses", model.num_classes, 1, 1048576, FROM_PRESET),
     .help = "Classifier outputs (from the preset when left out; fmnist_tiny: 10). At least 10 "
             "for Fashion-MNIST.",
     .readme = "classifier outputs"},
    {ROW_STR("model.init", model.init, DEF_STR("")), .kind = "path or URL",
     .help = "Weights to start from (finetuning): a safetensors file with timm parameter names "
             "(a path, file:// or s3://; S3 with checkpoint.endpoint and the AWS_* "
             "credentials), or a checkpoint (its root, for the newest complete step, or a "
             "step-N folder). Adapted as timm does: a head of another class count is new "
             "(see initHead); pos_embed of another grid is resampled bicubically with "
             "antialiasing; another patch size is refused. \"\" = random initialisation "
             "from training.seed.",
     .readme = "weights to start from: a timm-named safetensors file (path, `file://`, "
               "`s3://`) or a checkpoint (root or `step-N`); another class count gets a new "
               "head, another grid a resampled `pos_embed` (each logged)"},
    {ROW_ENUM("model.initHead", model.init_head, init_heads, DEF_ENUM(INIT_HEAD_NEW)),
     .help = "When model.init's head has another class count (or none): new (timm's init of "
             "a ViT head, trunc-normal std 0.02 weights and zero bias, from training.seed) or "
             "keep (refused, naming both class counts).",
     .readme = "`new`: a head of another class count is replaced by timm's init; `keep`: "
               "refused"},

    {ROW_ENUM("data.format", data.format, formats, DEF_ENUM(DATA_FASHION_MNIST)),
     .help = "fashion-mnist (the gzipped IDX files), webdataset (tar shards of images and "
             "labels, local or on S3; each rank reads its own shards) or imagefolder (a local "
             "directory with one subdirectory of images per class).",
     .readme = "`webdataset`: tar shards (`KEY.jpg` + `KEY.cls`), local or `s3://`; "
               "`imagefolder`: `DIR/CLASS/*.jpg`; see [Your own data](docs/user-guide.md#3-your-own-data)"},
    {ROW_STR("data.uri", data.uri, DEF_STR("file:///usr/share/datasets/fashion-mnist")),
     .kind = "path, pattern or URL",
     .help = "The training data: fashion-mnist: a directory (file:///dir or /dir) with the "
             "train-*-ubyte.gz files; webdataset: a shard pattern, local or "
             "s3://bucket/train-{000000..001023}.tar; imagefolder: a local directory (or "
             "mounted volume) of class subdirectories.",
     .readme = "fashion-mnist: the directory of the (gzipped) IDX files; webdataset: a shard "
               "pattern (`s3://b/train-{000000..001023}.tar`); imagefolder: a local directory"},
    {ROW_STR("data.testUri", data.test_uri, DEF_STR("")), .kind = "path, pattern or URL",
     .help = "The evaluation split, named as uri is. \"\" = fashion-mnist: the t10k files "
             "beside uri; webdataset and imagefolder: no evaluation.",
     .readme = "the evaluation split, named as `uri`; \"\" = fashion-mnist's t10k files beside "
               "`uri`, else no evaluation"},
    {ROW_STR("data.endpoint", data.endpoint, UNSET), .kind = "URL",
     .help = "S3 endpoint URL for s3:// data, e.g. https://s3.example:9000; unset = "
             "checkpoint.endpoint's, and without that AWS S3. The credentials are "
             "checkpoint.credentialsSecret's.",
     .readme = "S3 endpoint of `s3://` data; \"\" = `checkpoint.endpoint`'s, else AWS "
               "(credentials: `checkpoint.credentialsSecret`)"},
    {ROW_BOOL("data.augment", data.augment, DEF_BOOL(0)),
     .help = "Training augmentation, drawn per (seed, epoch, sample). fashion-mnist: random crop "
             "(2 px zero padding) and horizontal flip; webdataset and imagefolder: "
             "RandomResizedCrop(scale, ratio) to imageSize and horizontal flip (p 0.5). Off: "
             "the evaluation transform.",
     .readme = "drawn per (seed, epoch, sample); fashion-mnist: random crop (2 px zero padding) + "
               "horizontal flip; else RandomResizedCrop(`scale`, `ratio`) + flip; off: the "
               "evaluation transform"},
    {ROW_VEC("data.mean", data.mean, data.mean_n, 0, 1, 0), .dflt_words = "by `channels`",
     .help = "Per-channel mean subtracted after scaling pixels to [0, 1]: one number per "
             "model.channels. Unset = ImageNet's [0.485, 0.456, 0.406] for 3 channels, [0.5] "
             "for 1. Not used by fashion-mnist.",
     .item_help = "A channel's mean, in [0, 1] (pixel / 255).",
     .readme = "one per channel, pixel/255 units; unset: ImageNet's [0.485, 0.456, 0.406] "
               "(3 channels), [0.5] (1)"},
    {ROW_VEC("data.std", data.std, data.std_n, 0, 1, OPEN_MIN), .dflt_words = "by `channels`",
     .help = "Per-channel standard deviation the centred pixels are divided by: one number per "
             "model.channels. Unset = ImageNet's [0.229, 0.224, 0.225] for 3 channels, [0.5] "
             "for 1. Not used by fashion-mnist.",
     .item_help = "A channel's standard deviation, in (0, 1] (pixel / 255).",
     .readme = "one per channel; unset: ImageNet's [0.229, 0.224, 0.225] (3 channels), [0.5] (1)"},
    {ROW_PAIR("data.scale", data.scale_min, data.scale_max, 0, 1, OPEN_MIN, DEF_PAIR(0.08, 1.0)),
     .help = "RandomResizedCrop's [min, max] fraction of the image's area the crop covers "
             "(augment only); min <= max.",
     .item_help = "A fraction of the area, in (0, 1].",
     .readme = "RandomResizedCrop's area fraction [min, max] (with `augment`)"},
    {ROW_PAIR("data.ratio", data.ratio_min, data.ratio_max, 0, 100, OPEN_MIN,
              DEF_PAIR(0.75, 4.0 / 3.0)),
     .help = "RandomResizedCrop's [min, max] aspect ratio (width / height) of the crop, drawn "
             "log-uniformly (augment only); min <= max.",
     .item_help = "An aspect ratio (width / height), in (0, 100].",
     .readme = "RandomResizedCrop's aspect ratio [min, max], log-uniform (with `augment`)"},
    {ROW_STR("data.randAugment", data.rand_augment, DEF_STR("")),
     .kind = "timm's RandAugment string",
     .help = "timm's RandAugment after the crop and flip, on the 8-bit image (augment only; "
             "webdataset and imagefolder), e.g. rand-m9-mstd0.5-inc1 (DeiT's): sections m "
             "(magnitude, 10), n (ops per image, 2), p (each op's probability, 0.5), mstd "
             "(magnitude noise), mmax (magnitude bound, 10), inc1 (the increasing ops). Fill: "
             "round(255 x mean); filter: interpolation. \"\" = off.",
     .readme = "timm's RandAugment string, e.g. `rand-m9-mstd0.5-inc1` (DeiT's; with `augment`, "
               "not fashion-mnist); \"\" = off"},
    {ROW_DBL("data.randomErasing", data.random_erasing, 0, 1, 0, DEF_NUM(0)),
     .help = "timm's RandomErasing probability, on the normalised image (augment only; "
             "webdataset and imagefolder): one box of 2% to 1/3 of the area, aspect ratio 0.3 "
             "to 3.3 (log-uniform); 0 = off (DeiT: 0.25).",
     .readme = "timm's RandomErasing probability (with `augment`, not fashion-mnist; DeiT: 0.25)"},
    {ROW_ENUM("data.randomErasingMode", data.random_erasing_mode, erase_modes,
              DEF_ENUM(ERASE_PIXEL)),
     .help = "What the erased box holds: pixel (per-value normal noise, DeiT's), rand (one "
             "normal value per channel) or const (0).",
     .readme = "the erased box: per-value noise, per-channel noise, or 0"},
    {ROW_ENUM("data.interpolation", data.interpolation, interpolations, DEF_ENUM(INTERP_BICUBIC)),
     .help = "How crops are resized to imageSize: bilinear or bicubic (antialiased when "
             "shrinking, as torchvision's resize of a PIL image).",
     .readme = "resizing of crops to `imageSize` (antialiased when shrinking)"},
    {ROW_DBL("data.cropPct", data.crop_pct, 0, 1, OPEN_MIN, DEF_NUM(0.875)),
     .help = "Evaluation (and augment off) transform: resize the shorter side to imageSize / "
             "cropPct, then take the center imageSize x imageSize crop.",
     .readme = "evaluation: shorter side resized to imageSize / cropPct, then the center crop"},
    {ROW_INT("data.workers", data.workers, 0, 256, DEF_NUM(0)),
     .help = "Decode threads per rank; 0 = the CPUs left after training.threads, at least 1.",
     .readme = "decode threads per rank; 0 = the CPUs left after `training.threads`, at least 1"},
    {ROW_INT("data.prefetchBatches", data.prefetch_batches, 1, 64, DEF_NUM(2)),
     .help = "Micro-batches decoded ahead of training and queued, per rank.",
     .readme = "ready micro-batches queued ahead per rank"},
    {ROW_INT("data.shuffleBuffer", data.shuffle_buffer, 1, 1000000, DEF_NUM(1000)),
     .help = "Samples per shuffled block: each rank's stream is cut into blocks of this many "
             "samples, each permuted per (seed, epoch); resumable to the sample.",
     .readme = "samples per block permuted per (seed, epoch); resumable to the sample"},
    {ROW_U64("data.maxPixels", data.max_pixels, 1, JSON_EXACT_INT, DEF_NUM(89478485)),
     .help = "Decompression-bomb limit: an image whose header claims more pixels (width x "
             "height) is a bad sample, refused before decoding (PIL's default limit).",
     .readme = "images claiming more pixels are bad samples, refused before decoding (PIL's "
               "limit)"},
    {ROW_DBL("data.maxBadFraction", data.max_bad_fraction, 0, 1, 0, DEF_NUM(0.001)),
     .help = "Bad samples (undecodable, no label, too large) are skipped and counted; above this "
             "fraction of the samples read the run exits 3, naming the worst shard.",
     .readme = "bad samples are skipped and counted; above this fraction: exit 3 naming the "
               "worst shard"},
    {ROW_DBL("data.mixup", data.mixup, 0, 1000, 0, DEF_NUM(0.0)),
     .help = "timm's Mixup: mixup alpha; > 0 blends each training micro-batch with itself "
             "reversed, lambda ~ Beta(alpha, alpha), and trains on soft targets (label "
             "smoothing folded in). 0 = off. Evaluation is never mixed.",
     .readme = "timm's `mixup_alpha`: each training micro-batch blended with itself reversed, "
               "lambda ~ Beta(alpha, alpha), soft targets; 0 = off"},
    {ROW_DBL("data.cutmix", data.cutmix, 0, 1000, 0, DEF_NUM(0.0)),
     .help = "timm's Mixup: cutmix alpha; > 0 pastes a box of the reversed micro-batch into each "
             "image (timm's rand_bbox, lambda ~ Beta(alpha, alpha), then corrected to the box's "
             "area). 0 = off. With mixup too, one of them per micro-batch (mixupSwitchProb).",
     .readme = "timm's `cutmix_alpha`: a box of the reversed micro-batch pasted in, lambda "
               "corrected to its area; 0 = off"},
    {ROW_VEC("data.cutmixMinMax", data.cutmix_minmax, data.cutmix_minmax_n, 0, 1, 0),
     .all_items = 1, .dflt_words = "unset",
     .help = "timm's cutmix_minmax: [min, max] fractions of the image side; the box's height "
             "and width are drawn from [int(side x min), int(side x max)) instead of from "
             "lambda, and cutmix is on with alpha 1 (as timm forces). Unset = off.",
     .item_help = "A fraction of the image side, in [0, 1].",
     .readme = "timm's `cutmix_minmax`: box sides drawn from [min, max) x the image side; turns "
               "cutmix on (alpha 1)"},
    {ROW_DBL("data.mixupProb", data.mixup_prob, 0, 1, 0, DEF_NUM(1.0)),
     .help = "Probability that a micro-batch is mixed (timm's prob); an unmixed one still "
             "trains on its smoothed one-hot targets.",
     .readme = "probability that a micro-batch is mixed (timm's `prob`)"},
    {ROW_DBL("data.mixupSwitchProb", data.mixup_switch_prob, 0, 1, 0, DEF_NUM(0.5)),
     .help = "With both mixup and cutmix > 0: probability of cutmix instead of mixup for a "
             "micro-batch (timm's switch_prob).",
     .readme = "with both on: probability of cutmix instead of mixup (timm's `switch_prob`)"},
    {ROW_ENUM("data.mixupMode", data.mixup_mode, mixup_modes, DEF_ENUM(MIXUP_MODE_BATCH)),
     .help = "How the mixing parameters are drawn: batch (one draw per micro-batch, timm's "
             "default). pair and elem (per pair, per sample) are not implemented and refused.",
     .readme = "one draw per micro-batch (timm's `batch`); `pair` and `elem` are refused"},

    {ROW_LONG("training.steps", training.steps, 0, 1e12, DEF_NUM(0)),
     .help = "Optimizer steps to train. 0 = epochs x (training images / globalBatchSize).",
     .readme = "optimizer steps; 0 = `epochs` x (train images / global batch)"},
    {ROW_INT("training.epochs", training.epochs, 0, 1000000, DEF_NUM(2)),
     .help = "Passes over the training set; used when steps is 0.",
     .readme = "used when `steps` is 0"},
    {ROW_INT("training.globalBatchSize", training.global_batch_size, 1, 16777216, DEF_NUM(128)),
     .help = "Images per optimizer step over all ranks; must be divisible by microBatchSize x "
             "world size.",
     .readme = "images per optimizer step; divisible by microBatchSize x world size"},
    {ROW_INT("training.microBatchSize", training.micro_batch_size, 1, 65536, DEF_NUM(64)),
     .help = "Images per rank per forward/backward pass; gradient accumulation fills the rest of "
             "the global batch.",
     .readme = "per rank per forward/backward; gradient accumulation fills the rest"},
    {ROW_ENUM("training.precision", training.precision, precisions, DEF_ENUM(PRECISION_FP32)),
     .help = "fp32, bf16-mixed (bf16 matmuls and activations, fp32 master weights, optimizer "
             "state, LayerNorm and loss; on the CPU an emulation), or fp16-mixed (the same in "
             "IEEE half, for GPUs without bf16, with dynamic loss scaling as "
             "torch.cuda.amp.GradScaler: a step with inf/NaN gradients is skipped).",
     .readme = "bf16-mixed: fp32 master weights, AdamW state, LayerNorm and loss; matmuls read "
               "bf16 weights, and activations are stored in bf16 (on the CPU: rounded to bf16 "
               "where the GPU stores it, see `floatX` in `kernels/ops.h`). fp16-mixed: the same "
               "in IEEE half (GPUs without bf16, e.g. T4), with GradScaler's dynamic loss "
               "scaling (scale 2^16, x2 after 2000 clean steps, x0.5 and the step skipped on "
               "inf/NaN gradients; skips logged and counted as `skipped_steps`)"},
    {ROW_ENUM("training.sharding", training.sharding, shardings, DEF_ENUM(SHARDING_NONE)),
     .help = "none (DDP: replicated parameters, all-reduced gradients), grad-op (ZeRO-2: "
             "gradients and optimizer state sharded) or full (FSDP: parameters too, gathered per "
             "block). No effect at world size 1.",
     .readme = "no effect at world size 1"},
    {ROW_BOOL("training.activationCheckpointing", training.activation_checkpointing, DEF_BOOL(0)),
     .help = "Recompute each block's activations in the backward pass instead of keeping them "
             "(less memory, ~1/3 more compute).",
     .readme = "keep only each block's input and recompute the block in backward (identical "
               "gradients, depth x less block activation memory)"},
    {ROW_DBL("training.dropPath", training.drop_path, 0, 1, OPEN_MAX, DEF_NUM(0)),
     .help = "Stochastic depth (timm's drop_path_rate): each residual branch (attention, MLP) "
             "of each sample is dropped with a probability rising linearly over the blocks, "
             "from 0 at the first to dropPath at the last, and scaled by 1/(1 - p) when kept; "
             "drawn per (seed, step, sample, block, branch). Training only. 0 = off.",
     .readme = "stochastic depth: rate rising linearly over the blocks to this at the last "
               "(timm's `drop_path_rate`); training only"},
    {ROW_DBL("training.labelSmoothing", training.label_smoothing, 0, 1, OPEN_MAX, DEF_NUM(0)),
     .help = "Label smoothing (timm's LabelSmoothingCrossEntropy): the training loss is the "
             "cross-entropy against (1 - x) one-hot + x / numClasses. The test loss stays plain "
             "cross-entropy. 0 = off.",
     .readme = "training targets (1 - x) one-hot + x / numClasses (timm's "
               "`LabelSmoothingCrossEntropy`); the test loss stays plain"},
    {ROW_ENUM("training.optimizer.name", training.optimizer.name, optimizers,
              DEF_ENUM(OPTIMIZER_ADAMW)),
     .help = "adamw (torch.optim.AdamW semantics; no weight decay on biases, norms, pos_embed, "
             "cls_token).",
     .readme = "torch.optim.AdamW semantics; no decay on biases, norms, `pos_embed`, `cls_token` "
               "(timm's groups)"},
    {ROW_DBL("training.optimizer.lr", training.optimizer.lr, 0, 10, OPEN_MIN, DEF_NUM(3e-3)),
     .help = "Peak learning rate, in (0, 10].",
     .readme = "peak learning rate"},
    {ROW_DBL("training.optimizer.weightDecay", training.optimizer.weight_decay, 0, 10, 0,
             DEF_NUM(0.05)),
     .help = "Decoupled weight decay, in [0, 10].",
     .readme = "decoupled weight decay"},
    {ROW_PAIR("training.optimizer.betas", training.optimizer.beta1, training.optimizer.beta2, 0, 1,
              OPEN_MAX, DEF_PAIR(0.9, 0.999)),
     .help = "AdamW's [beta1, beta2], each in [0, 1).",
     .item_help = "An exponential decay rate, in [0, 1).",
     .readme = ""},
    {ROW_DBL("training.optimizer.eps", training.optimizer.eps, 0, 1, OPEN_MIN, DEF_NUM(1e-8)),
     .help = "AdamW's epsilon, in (0, 1].",
     .readme = ""},
    {ROW_INT("training.optimizer.warmupSteps", training.optimizer.warmup_steps, 0, 1000000000,
             DEF_NUM(50)),
     .help = "Linear warmup, lr x (step+1)/warmupSteps; must not exceed steps.",
     .readme = "linear warmup lr x (step+1)/warmup; must not exceed `steps`"},
    {ROW_ENUM("training.optimizer.schedule", training.optimizer.schedule, schedules,
              DEF_ENUM(SCHEDULE_COSINE)),
     .help = "cosine (from lr down to minLr over the steps after warmup) or constant.",
     .readme = "cosine from lr to minLr over the steps after warmup"},
    {ROW_DBL("training.optimizer.minLr", training.optimizer.min_lr, 0, 10, 0, DEF_NUM(0.0)),
     .help = "Final learning rate of the cosine schedule, in [0, 10] and at most lr.",
     .readme = ""},
    {ROW_DBL("training.optimizer.gradClip", training.optimizer.grad_clip, 0, 1e6, 0, DEF_NUM(1.0)),
     .help = "Clip the global gradient norm to this value (as clip_grad_norm_); 0 = off.",
     .readme = "global gradient-norm clip (0 = off), as `clip_grad_norm_`"},
    {ROW_DBL("training.optimizer.layerDecay", training.optimizer.layer_decay, 0, 1, 0,
             DEF_NUM(0.0)),
     .help = "BEiT's layer-wise learning-rate decay with timm's groups "
             "(param_groups_layer_decay): cls_token, pos_embed and patch_embed are layer 0, "
             "blocks.i layer i+1, the final norm joins the last block, the head is layer "
             "depth+1; a tensor's lr is lr x layerDecay^(depth+1-layer). 0 = off.",
     .readme = "layer-wise lr decay (timm's groups): lr x layerDecay^(depth+1-layer); 0 = off"},
    {ROW_DBL("training.ema.decay", training.ema.decay, 0, 1, OPEN_MAX, DEF_NUM(0.0)),
     .help = "Exponential moving average of the weights (timm's ModelEmaV2): after every "
             "optimizer step ema = decay x ema + (1 - decay) x weights, in fp32, sharded like "
             "the master weights and saved in checkpoints; the EMA weights are evaluated and "
             "exported. 0 = off, else in (0, 1), e.g. 0.9998.",
     .readme = "EMA of the weights after every step (timm's `ModelEmaV2`), fp32, sharded like "
               "the master weights, checkpointed; evaluation and export use it; 0 = off, e.g. "
               "0.9998"},
    {ROW_BOOL("training.ema.warmup", training.ema.warmup, DEF_BOOL(0)),
     .help = "timm ModelEmaV3's decay warmup: the decay of update n (1-based) is min(decay, "
             "1 - n^(-2/3)), so the first update copies the weights. Off: decay from the "
             "first step, starting from the initial weights.",
     .readme = "timm `ModelEmaV3`'s warmup: update n uses min(decay, 1 - n^(-2/3)); off: "
               "`decay` throughout, from the initial weights"},
    {ROW_STRS("training.freeze", training.freeze, training.freeze_n), .dflt_words = "none",
     .kind = "list of names",
     .help = "Parameters to freeze, as prefixes of timm's parameter names (cls_token, "
             "pos_embed, patch_embed, blocks, blocks.3.attn, norm, head, ...): a prefix "
             "matches a name that equals it or goes on with a '.' after it. Frozen "
             "parameters get no gradient, no AdamW state and no weight decay or update, and "
             "their gradients are not communicated (under sharding full, a unit that also "
             "holds trainable parameters is reduce-scattered whole). The list is part of the "
             "checkpoint's model: a resume needs the same list. [cls_token, pos_embed, patch_embed, blocks, norm] is "
             "a linear probe (only the head trains). A prefix that matches no parameter, or "
             "a list that freezes every parameter, is refused.",
     .item_help = "A timm parameter-name prefix, e.g. blocks.0 or patch_embed.",
     .readme = "timm parameter-name prefixes to freeze (matched at a `.`): no gradient, "
               "AdamW state or update; `[cls_token, pos_embed, patch_embed, blocks, norm]` "
               "is a linear probe"},
    {ROW_U64("training.seed", training.seed, 0, JSON_EXACT_INT, DEF_NUM(1234)),
     .help = "Seed of initialisation, shuffling and augmentation; the same seed and thread count "
             "give the same bits.",
     .readme = "init, shuffle and augmentation; same seed and thread count = same bits"},
    {ROW_ENUM("training.device", training.device, devices, DEF_ENUM(DEVICE_AUTO)),
     .help = "cpu, cuda, or auto (cuda when a GPU is visible, else cpu).",
     .readme = "`auto`: the GPU when one is usable, else the CPU (logged); `cuda` without a "
               "usable GPU exits 2"},
    {ROW_INT("training.rendezvousTimeoutSeconds", training.rendezvous_timeout_seconds, 1, 86400,
             DEF_NUM(300)),
     .help = "How long the ranks wait for each other at rendezvous before exiting (retryable).",
     .readme = "seconds the ranks wait for each other at start before exiting (retryable), "
               "naming the missing ranks"},
    {ROW_INT("training.collectiveTimeoutSeconds", training.collective_timeout_seconds, 1, 86400,
             DEF_NUM(600)),
     .help = "How long a collective (all-reduce, all-gather, ...) waits for the other ranks "
             "before the peer counts as lost and every rank exits (retryable).",
     .readme = "seconds a collective waits for the other ranks before the peer counts as lost "
               "(retryable exit)"},
    {ROW_INT("training.heartbeatTimeoutSeconds", training.heartbeat_timeout_seconds, 1, 600,
             DEF_NUM(5)),
     .help = "Every process of a multi-rank run heartbeats to rank 0's rendezvous store every "
             "fifth of this on a thread of its own; a peer silent this long (frozen, "
             "partitioned, its node gone) is lost with evidence heartbeat, one whose "
             "connection closes at once with evidence closed: the survivor writes "
             "status.lostPeer and exits peer_lost (retryable), even while a collective "
             "waits. A process whose own heartbeats went unanswered this long (it was "
             "frozen) exits without writing a checkpoint or a status.",
     .readme = "seconds without a rendezvous heartbeat before a peer counts as lost: the "
               "survivor writes `status.lostPeer` and exits `peer_lost` (retryable) without "
               "waiting for a collective; a rank frozen this long exits on waking without "
               "writing"},
    {ROW_INT("training.threads", training.threads, 0, 1024, DEF_NUM(0)),
     .help = "CPU threads per process (OpenBLAS and OpenMP); 0 = as many as the CPU affinity and "
             "the cgroup CPU quota allow. A value above that is kept, with a warning "
             "(event=threads_above_cpus) naming both numbers.",
     .readme = "CPU threads (OpenBLAS and OpenMP); 0 = as many as the CPU affinity and the cgroup "
               "CPU quota allow; a value above that is kept, with a warning "
               "(`event=threads_above_cpus`) naming both numbers"},
    {ROW_INT("training.logInterval", training.log_interval, 1, 1000000000, DEF_NUM(50)),
     .help = "Steps between progress log lines.",
     .readme = "steps between progress lines"},
    {ROW_INT("training.reportIntervalSeconds", training.report_interval_seconds, 1, 86400,
             DEF_NUM(10)),
     .help = "Least seconds between two writes of status.progress by rank 0 (a stored checkpoint "
             "and the end of training are reported at once).",
     .readme = "least seconds between two writes of the ViTJob's `status.progress` by rank 0 "
               "(stored checkpoints and the end are written at once)"},
    {ROW_INT("training.evalInterval", training.eval_interval, 0, 1000000000, DEF_NUM(0)),
     .help = "Steps between test-set evaluations; 0 = at the end only.",
     .readme = "steps between test-set evaluations; 0 = at the end only"},
    {ROW_STR("training.exportPath", training.export_path, DEF_STR("model.safetensors")),
     .kind = "path",
     .help = "File the final weights are written to (safetensors, timm names); \"\" = none.",
     .readme = "final weights; \"\" = none"},

    {ROW_STR("checkpoint.uri", checkpoint.uri, UNSET),
     .kind = "`s3://BUCKET[/PREFIX]` \\| `file:///DIR`", .pattern = "^$|^(s3|file)://",
     .help = "Where checkpoints go: s3://bucket/prefix or file:///dir; each step is a directory "
             "step-NNNNNNNNN/ with one shard per rank and a manifest.json written last. Unset or "
             "\"\" = no checkpoints.",
     .readme = "where checkpoints go and resume comes from; \"\" = none"},
    {ROW_INT("checkpoint.intervalSteps", checkpoint.interval_steps, 1, 1000000000, DEF_NUM(500)),
     .help = "Steps between checkpoints.",
     .readme = "steps between checkpoints (also one at the end and on SIGTERM)"},
    {ROW_INT("checkpoint.keep", checkpoint.keep, 1, 1000000, DEF_NUM(3)),
     .help = "Complete checkpoints kept; older ones are deleted after a newer manifest is "
             "written.",
     .readme = "newest complete steps kept; older ones are deleted once a newer manifest exists"},
    {ROW_STR("checkpoint.endpoint", checkpoint.endpoint, UNSET), .kind = "URL",
     .help = "S3 endpoint URL for s3:// URIs, e.g. https://s3.example:9000; unset = AWS S3.",
     .readme = "an S3-compatible server (MinIO, Ceph): path-style there; \"\" = AWS, "
               "virtual-hosted"},
    {ROW_STR("checkpoint.credentialsSecret", checkpoint.credentials_secret, UNSET),
     .kind = "Secret name",
     .help = "Name of a Secret in the job's namespace with keys AWS_ACCESS_KEY_ID and "
             "AWS_SECRET_ACCESS_KEY (optionally AWS_REGION, AWS_SESSION_TOKEN), passed to the "
             "workers as environment variables.",
     .readme = "the operator mounts its `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, "
               "`AWS_SESSION_TOKEN` into the workers (ignored by the worker itself)"},
};
#define N_KEYS (sizeof config_keys / sizeof config_keys[0])

/* Spec keys that belong to the operator: accepted and ignored by the worker. */
static const char *const operator_keys[] = {"replicas", "gpusPerReplica", "gpuMemory",
                                            "image",    "runPolicy",      "suspend",
                                            "template", NULL};
/* Manifest keys around the spec: ignored. */
static const char *const manifest_keys[] = {"apiVersion", "kind", "metadata", "status", NULL};

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

typedef struct {
    const char *origin; /* prefix of every message; NULL = none (validation) */
    char *err;
    size_t errlen;
} load_ctx;

static int in_list(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (strcmp(*list, s) == 0)
            return 1;
    return 0;
}

/* Copies s into a fixed buffer, zero-filling the rest (so that equal configs
 * compare equal byte for byte). The caller has checked that it fits. */
static void set_str(char *dst, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n >= cap)
        n = cap - 1;
    memset(dst, 0, cap);
    memcpy(dst, s, n);
}

static char *dup_range(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Copy of s without leading/trailing whitespace; caller frees. */
static char *dup_trimmed(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    return dup_range(s, n);
}

/* Shortest "%.Ng" that reads back as exactly d. */
static void fmt_num(char *out, size_t n, double d)
{
    if (isnan(d)) {
        snprintf(out, n, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(out, n, d < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, d);
        if (strtod(out, NULL) == d)
            return;
    }
}

/* `"text"` with quotes, backslashes and control bytes escaped, cut at 80 bytes. */
static void quote(char *out, size_t n, const char *s)
{
    size_t o = 0;
    const size_t limit = 80;
    if (n < 8) {
        if (n)
            out[0] = '\0';
        return;
    }
    out[o++] = '"';
    size_t i = 0;
    for (; i < limit && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        char piece[8];
        if (c == '"' || c == '\\')
            snprintf(piece, sizeof piece, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            snprintf(piece, sizeof piece, "\\x%02x", c);
        else
            snprintf(piece, sizeof piece, "%c", c);
        size_t pl = strlen(piece);
        if (o + pl + 5 >= n) /* room for `..."` and NUL */
            break;
        memcpy(out + o, piece, pl);
        o += pl;
    }
    if (s[i]) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o++] = '"';
    out[o] = '\0';
}

/* `'key'`: a key as messages show it (escaped like quote(), single quotes). */
static void key_quote(char *out, size_t n, const char *key)
{
    quote(out, n, key);
    size_t len = strlen(out);
    if (len >= 2) {
        out[0] = '\'';
        out[len - 1] = '\'';
    }
}

/* "string \"ten\"", "number 1.5", "boolean true", "null", "array", "object". */
static void describe(char *out, size_t n, const cJSON *v)
{
    char buf[200];
    if (v == NULL) {
        snprintf(out, n, "nothing");
    } else if (cJSON_IsString(v)) {
        quote(buf, sizeof buf, v->valuestring);
        snprintf(out, n, "string %s", buf);
    } else if (cJSON_IsNumber(v)) {
        fmt_num(buf, sizeof buf, v->valuedouble);
        snprintf(out, n, "number %s", buf);
    } else if (cJSON_IsBool(v)) {
        snprintf(out, n, "boolean %s", cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(out, n, "null");
    } else if (cJSON_IsArray(v)) {
        snprintf(out, n, "array");
    } else if (cJSON_IsObject(v)) {
        snprintf(out, n, "object");
    } else {
        snprintf(out, n, "a value of unknown type");
    }
}

/* Writes "<origin>: <message>" into the caller's buffer, on one line. */
__attribute__((format(printf, 2, 3))) static int fail(const load_ctx *c, const char *fmt, ...)
{
    if (c->err == NULL || c->errlen == 0)
        return VJ_ERR_CONFIG;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->origin)
        snprintf(c->err, c->errlen, "%s: %s", c->origin, msg);
    else
        snprintf(c->err, c->errlen, "%s", msg);
    for (char *p = c->err; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    return VJ_ERR_CONFIG;
}


/* ------------------------------------------------------------------------ */
/* Table lookups and suggestions                                             */

static const config_key *find_key(const char *path)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(config_keys[i].path, path) == 0)
            return &config_keys[i];
    return NULL;
}

/* "model", "training.optimizer", ...: a proper prefix of some key's path. */
static int is_section(const char *path)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < N_KEYS; i++)
        if (strncmp(config_keys[i].path, path, n) == 0 && config_keys[i].path[n] == '.')
            return 1;
    return 0;
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > PATH_MAX_LEN || lb > PATH_MAX_LEN)
        return (size_t)-1;
    size_t row[PATH_MAX_LEN + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Equal ignoring case, '_' and '-': "model.image_size" ~ "model.imageSize". */
static int loose_equal(const char *a, const char *b)
{
    for (;;) {
        while (*a == '_' || *a == '-')
            a++;
        while (*b == '_' || *b == '-')
            b++;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
        if (*a == '\0')
            return 1;
        a++;
        b++;
    }
}

static const char *last_part(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

/* The key the user most likely meant, or NULL. */
static const char *suggest(const char *path, int spec_level)
{
    static const char *const sections[] = {"model", "data", "training", "training.optimizer",
                                           "training.ema", "checkpoint", NULL};
    const char *best = NULL;
    size_t best_d = 3; /* only suggest within an edit distance of 2 */
    const char *cands[N_KEYS + 16];
    size_t nc = 0;
    for (size_t i = 0; i < N_KEYS; i++)
        cands[nc++] = config_keys[i].path;
    for (size_t i = 0; sections[i]; i++)
        cands[nc++] = sections[i];
    if (spec_level)
        for (size_t i = 0; operator_keys[i]; i++)
            cands[nc++] = operator_keys[i];

    for (size_t i = 0; i < nc; i++)
        if (loose_equal(path, cands[i]))
            return cands[i];
    if (strlen(path) >= 4) {
        for (size_t i = 0; i < nc; i++) {
            size_t d = edit_distance(path, cands[i]);
            if (d < best_d) {
                best_d = d;
                best = cands[i];
            }
        }
        if (best)
            return best;
    }
    /* Right name, wrong section: "training.lr" -> "training.optimizer.lr". */
    const char *leaf = last_part(path);
    for (size_t i = 0; i < N_KEYS; i++) {
        if (loose_equal(leaf, last_part(config_keys[i].path))) {
            if (best)
                return NULL; /* ambiguous */
            best = config_keys[i].path;
        }
    }
    return best;
}

static int fail_unknown(const load_ctx *c, const char *path, int spec_level)
{
    char q[200];
    key_quote(q, sizeof q, path);
    const char *s = suggest(path, spec_level);
    if (s)
        return fail(c, "unknown key %s (did you mean '%s'?)", q, s);
    return fail(c, "unknown key %s", q);
}

/* ------------------------------------------------------------------------ */
/* Applying one value to one field                                           */

static int check_range(const load_ctx *c, const config_key *k, const char *name, double d)
{
    int ok = (k->open & OPEN_MIN) ? d > k->min : d >= k->min;
    ok = ok && ((k->open & OPEN_MAX) ? d < k->max : d <= k->max);
    if (ok) /* also false for NaN */
        return 0;
    char v[64], lo[64], hi[64];
    fmt_num(v, sizeof v, d);
    fmt_num(lo, sizeof lo, k->min);
    fmt_num(hi, sizeof hi, k->max);
    return fail(c, "%s=%s is out of range %c%s, %s%c", name, v, (k->open & OPEN_MIN) ? '(' : '[', lo,
                hi, (k->open & OPEN_MAX) ? ')' : ']');
}

static int fail_choices(const load_ctx *c, const config_key *k, const char *value)
{
    char list[512] = "";
    size_t used = 0;
    for (size_t i = 0;; i++) {
        const char *name = k->type == KT_PRESET ? (i < N_PRESETS ? presets[i].name : NULL)
                                                : k->choices[i];
        if (name == NULL)
            break;
        int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", name);
        if (w < 0 || (size_t)w >= sizeof list - used)
            break;
        used += (size_t)w;
    }
    char q[200];
    quote(q, sizeof q, value);
    return fail(c, "%s=%s is not one of %s", k->path, q, list);
}

/* "an array of 2 numbers", "an array of 1 to 3 numbers" */
_Static_assert(NUMS_MAX >= 2, "a KT_PAIR's two numbers fit in NUMS_MAX");

/* The fewest numbers an array key takes. */
static int min_items(const config_key *k)
{
    return k->type == KT_PAIR || k->all_items ? k->items : 1;
}

static void items_words(char *out, size_t n, const config_key *k)
{
    if (min_items(k) == k->items)
        snprintf(out, n, "an array of %d numbers", k->items);
    else
        snprintf(out, n, "an array of 1 to %d numbers", k->items);
}

/* The numbers of a KT_PAIR or KT_VEC value v (an array of 2, or of 1 to
 * k->items), each checked against the row's bounds, into nums[0..*n). */
static int number_array(const load_ctx *c, const config_key *k, const cJSON *v, double *nums,
                        int *n)
{
    char got[256], want[64];
    items_words(want, sizeof want, k);
    if (!cJSON_IsArray(v)) {
        describe(got, sizeof got, v);
        return fail(c, "%s: expected %s, got %s", k->path, want, got);
    }
    const int len = cJSON_GetArraySize(v);
    const int lo = min_items(k);
    if (len < lo || len > k->items)
        return fail(c, "%s: expected %s, got an array of %d", k->path, want, len);
    for (int i = 0; i < len; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        char name[PATH_MAX_LEN + 8];
        snprintf(name, sizeof name, "%s[%d]", k->path, i);
        if (!cJSON_IsNumber(e)) {
            describe(got, sizeof got, e);
            return fail(c, "%s: expected a number, got %s", name, got);
        }
        int rc = check_range(c, k, name, e->valuedouble);
        if (rc)
            return rc;
        nums[i] = e->valuedouble;
    }
    *n = len;
    return 0;
}

/* Checks v against row k and, only if it passes, stores it into cfg. */
static int apply_value(const load_ctx *c, vit_job_config *cfg, const config_key *k, const cJSON *v)
{
    char *field = (char *)cfg + k->off;
    char got[256];
    describe(got, sizeof got, v);

    switch (k->type) {
    case KT_INT:
    case KT_LONG:
    case KT_U64: {
        if (!cJSON_IsNumber(v))
            return fail(c, "%s: expected an integer, got %s", k->path, got);
        double d = v->valuedouble;
        if (!isfinite(d) || d != floor(d))
            return fail(c, "%s: expected an integer, got %s", k->path, got);
        int rc = check_range(c, k, k->path, d);
        if (rc)
            return rc;
        if (k->type == KT_INT)
            *(int *)(void *)field = (int)d;
        else if (k->type == KT_LONG)
            *(long *)(void *)field = (long)d;
        else
            *(unsigned long long *)(void *)field = (unsigned long long)d;
        return 0;
    }
    case KT_DOUBLE: {
        if (!cJSON_IsNumber(v))
            return fail(c, "%s: expected a number, got %s", k->path, got);
        int rc = check_range(c, k, k->path, v->valuedouble);
        if (rc)
            return rc;
        *(double *)(void *)field = v->valuedouble;
        return 0;
    }
    case KT_BOOL:
        if (!cJSON_IsBool(v))
            return fail(c, "%s: expected a boolean (true or false), got %s", k->path, got);
        *(int *)(void *)field = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    case KT_ENUM: {
        if (!cJSON_IsString(v))
            return fail(c, "%s: expected a string, got %s", k->path, got);
        for (int i = 0; k->choices[i]; i++)
            if (strcmp(k->choices[i], v->valuestring) == 0) {
                *(int *)(void *)field = i; /* enums of small values are int-sized */
                return 0;
            }
        return fail_choices(c, k, v->valuestring);
    }
    case KT_STRING:
    case KT_PRESET: {
        if (!cJSON_IsString(v))
            return fail(c, "%s: expected a string, got %s", k->path, got);
        const char *s = v->valuestring;
        size_t n = strlen(s);
        if (n >= k->size)
            return fail(c, "%s: a string of %zu bytes is too long (at most %zu)", k->path, n,
                        k->size - 1);
        if (k->type == KT_PRESET) {
            /* "" = no preset: leave the dims as they are. */
            if (n > 0 && config_preset(&cfg->model, s) != 0)
                return fail_choices(c, k, s);
        }
        set_str(field, k->size, s);
        return 0;
    }
    case KT_STRS: {
        const size_t cap = k->size / (size_t)k->items; /* one string's, with its NUL */
        if (cJSON_IsNull(v)) { /* not given: none */
            memset(field, 0, k->size);
            *(int *)(void *)((char *)cfg + k->off2) = 0;
            return 0;
        }
        if (!cJSON_IsArray(v))
            return fail(c, "%s: expected an array of strings, got %s", k->path, got);
        const int len = cJSON_GetArraySize(v);
        if (len > k->items)
            return fail(c, "%s: expected at most %d strings, got an array of %d", k->path,
                        k->items, len);
        for (int i = 0; i < len; i++) {
            const cJSON *e = cJSON_GetArrayItem(v, i);
            describe(got, sizeof got, e);
            if (!cJSON_IsString(e) || !e->valuestring[0])
                return fail(c, "%s[%d]: expected a non-empty string, got %s", k->path, i, got);
            if (strlen(e->valuestring) >= cap)
                return fail(c, "%s[%d]: a string of %zu bytes is too long (at most %zu)",
                            k->path, i, strlen(e->valuestring), cap - 1);
        }
        memset(field, 0, k->size);
        for (int i = 0; i < len; i++)
            set_str(field + (size_t)i * cap, cap, cJSON_GetArrayItem(v, i)->valuestring);
        *(int *)(void *)((char *)cfg + k->off2) = len;
        return 0;
    }
    case KT_PAIR:
    case KT_VEC: {
        double nums[NUMS_MAX]; /* >= 2, a pair's */
        int n = 0;
        if (k->type == KT_VEC && cJSON_IsNull(v)) { /* not given: the key's default */
            memset(field, 0, k->size);
            *(int *)(void *)((char *)cfg + k->off2) = 0;
            return 0;
        }
        int rc = number_array(c, k, v, nums, &n);
        if (rc)
            return rc;
        if (k->type == KT_PAIR) {
            *(double *)(void *)field = nums[0];
            *(double *)(void *)((char *)cfg + k->off2) = nums[1];
        } else {
            memset(field, 0, k->size);
            memcpy(field, nums, (size_t)n * sizeof nums[0]);
            *(int *)(void *)((char *)cfg + k->off2) = n;
        }
        return 0;
    }
    }
    return fail(c, "%s: internal error: unknown key type", k->path);
}

/* The field as a cJSON value. `exact` prints numbers as raw text that reads
 * back bit for bit (cJSON's own printer may round the last digit). */
static cJSON *field_to_json(const vit_job_config *cfg, const config_key *k, int exact)
{
    const char *field = (const char *)cfg + k->off;
    char num[64];
    switch (k->type) {
    case KT_INT:
        snprintf(num, sizeof num, "%d", *(const int *)(const void *)field);
        return exact ? cJSON_CreateRaw(num) : cJSON_CreateNumber(*(const int *)(const void *)field);
    case KT_LONG:
        snprintf(num, sizeof num, "%ld", *(const long *)(const void *)field);
        return exact ? cJSON_CreateRaw(num)
                     : cJSON_CreateNumber((double)*(const long *)(const void *)field);
    case KT_U64:
        snprintf(num, sizeof num, "%llu", *(const unsigned long long *)(const void *)field);
        return exact ? cJSON_CreateRaw(num)
                     : cJSON_CreateNumber((double)*(const unsigned long long *)(const void *)field);
    case KT_DOUBLE: {
        double d = *(const double *)(const void *)field;
        if (!exact || !isfinite(d))
            return cJSON_CreateNumber(d);
        fmt_num(num, sizeof num, d);
        return cJSON_CreateRaw(num);
    }
    case KT_BOOL:
        return cJSON_CreateBool(*(const int *)(const void *)field != 0);
    case KT_ENUM: {
        int v = *(const int *)(const void *)field, n = 0;
        while (k->choices[n])
            n++;
        return cJSON_CreateString(v >= 0 && v < n ? k->choices[v] : "?");
    }
    case KT_STRING:
    case KT_PRESET: {
        char *s = dup_range(field, strnlen(field, k->size - 1));
        if (!s)
            return NULL;
        cJSON *j = cJSON_CreateString(s);
        free(s);
        return j;
    }
    case KT_STRS: {
        const size_t cap = k->size / (size_t)k->items;
        int n = *(const int *)(const void *)((const char *)cfg + k->off2);
        if (n < 0 || n > k->items) /* set by code: shown as the error it is */
            return cJSON_CreateNumber(n);
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; arr && i < n; i++) {
            const char *f = field + (size_t)i * cap;
            char *s = dup_range(f, strnlen(f, cap - 1));
            cJSON *e = s ? cJSON_CreateString(s) : NULL;
            free(s);
            if (!e || !cJSON_AddItemToArray(arr, e)) {
                cJSON_Delete(e);
                cJSON_Delete(arr);
                return NULL;
            }
        }
        return arr;
    }
    case KT_PAIR:
    case KT_VEC: {
        double nums[NUMS_MAX]; /* >= 2, a pair's */
        int n = 2;
        const void *second = (const char *)cfg + k->off2;
        if (k->type == KT_PAIR) {
            nums[0] = *(const double *)(const void *)field;
            nums[1] = *(const double *)second;
        } else {
            n = *(const int *)second;
            if (n == 0)
                return cJSON_CreateNull(); /* not given */
            if (n < 0 || n > k->items)     /* set by code: shown as the error it is */
                return cJSON_CreateNumber(n);
            memcpy(nums, field, (size_t)n * sizeof nums[0]);
        }
        cJSON *arr = cJSON_CreateArray();
        if (!arr)
            return NULL;
        for (int i = 0; i < n; i++) {
            cJSON *e;
            if (exact && isfinite(nums[i])) {
                fmt_num(num, sizeof num, nums[i]);
                e = cJSON_CreateRaw(num);
            } else {
                e = cJSON_CreateNumber(nums[i]);
            }
            if (!e || !cJSON_AddItemToArray(arr, e)) {
                cJSON_Delete(e);
                cJSON_Delete(arr);
                return NULL;
            }
        }
        return arr;
    }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Walking a document                                                        */

/* The dotted path of `key` under `prefix`; -1 if the key cannot be one of ours. */
static int join_path(char *out, size_t n, const char *prefix, const char *key)
{
    if (key[0] == '\0' || strchr(key, '.'))
        return -1;
    int w = prefix[0] ? snprintf(out, n, "%s.%s", prefix, key) : snprintf(out, n, "%s", key);
    return (w < 0 || (size_t)w >= n) ? -1 : 0;
}

static int check_duplicate(const load_ctx *c, const cJSON *obj, const cJSON *child,
                           const char *shown)
{
    for (const cJSON *prev = obj->child; prev && prev != child; prev = prev->next) {
        if (prev->string && strcmp(prev->string, child->string) == 0) {
            char q[200];
            key_quote(q, sizeof q, shown);
            return fail(c, "duplicate key %s", q);
        }
    }
    return 0;
}

static int apply_section(const load_ctx *c, vit_job_config *cfg, const cJSON *obj,
                         const char *prefix)
{
    const int spec_level = prefix[0] == '\0';
    char path[PATH_MAX_LEN];

    /* Pass 1: presets, so that explicit keys of the same section override
     * them whatever the key order. */
    for (const cJSON *ch = obj->child; ch; ch = ch->next) {
        if (join_path(path, sizeof path, prefix, ch->string) != 0)
            continue;
        const config_key *k = find_key(path);
        if (k && k->type == KT_PRESET) {
            int rc = apply_value(c, cfg, k, ch);
            if (rc)
                return rc;
        }
    }

    /* Pass 2: everything else, in document order. */
    for (const cJSON *ch = obj->child; ch; ch = ch->next) {
        if (join_path(path, sizeof path, prefix, ch->string) != 0) {
            char shown[PATH_MAX_LEN + 64], q[200];
            snprintf(shown, sizeof shown, "%s%s%s", prefix, spec_level ? "" : ".", ch->string);
            if (!strchr(ch->string, '.'))
                return fail_unknown(c, shown, spec_level);
            key_quote(q, sizeof q, shown);
            return fail(c, "unknown key %s (write dotted keys as nested sections)", q);
        }
        int rc = check_duplicate(c, obj, ch, path);
        if (rc)
            return rc;
        const config_key *k = find_key(path);
        if (k) {
            if (k->type == KT_PRESET)
                continue;
            rc = apply_value(c, cfg, k, ch);
            if (rc)
                return rc;
            continue;
        }
        if (is_section(path)) {
            if (cJSON_IsNull(ch)) /* `checkpoint:` with nothing under it */
                continue;
            if (!cJSON_IsObject(ch)) {
                char got[256];
                describe(got, sizeof got, ch);
                return fail(c, "%s: expected an object, got %s", path, got);
            }
            rc = apply_section(c, cfg, ch, path);
            if (rc)
                return rc;
            continue;
        }
        if (spec_level && in_list(operator_keys, path)) {
            LOG_DEBUG("config", "ignored=%s reason=operator-only", LOGV(path));
            continue;
        }
        return fail_unknown(c, path, spec_level);
    }
    return 0;
}

/* The document is the bare spec, or a ViTJob manifest whose `spec` we use. */
static int apply_document(const load_ctx *c, vit_job_config *cfg, const cJSON *root)
{
    char got[256];
    if (!cJSON_IsObject(root)) {
        describe(got, sizeof got, root);
        return fail(c, "expected an object (the spec or a ViTJob manifest) at the top level, got %s",
                    got);
    }
    int manifest = cJSON_GetObjectItemCaseSensitive(root, "apiVersion") ||
                   cJSON_GetObjectItemCaseSensitive(root, "kind") ||
                   cJSON_GetObjectItemCaseSensitive(root, "spec");
    if (!manifest)
        return apply_section(c, cfg, root, "");

    const cJSON *spec = NULL;
    for (const cJSON *ch = root->child; ch; ch = ch->next) {
        int rc = check_duplicate(c, root, ch, ch->string);
        if (rc)
            return rc;
        if (strcmp(ch->string, "spec") == 0)
            spec = ch;
        else if (!in_list(manifest_keys, ch->string))
            return fail_unknown(c, ch->string, 0);
    }
    if (spec == NULL)
        return fail(c, "the ViTJob manifest has no spec");
    if (!cJSON_IsObject(spec)) {
        describe(got, sizeof got, spec);
        return fail(c, "spec: expected an object, got %s", got);
    }
    return apply_section(c, cfg, spec, "");
}

/* YAML as the config reads it: YAML 1.1 scalars, no aliases (lib/yaml_json). */
static int yaml_to_json(const load_ctx *c, const char *text, size_t len, cJSON **out)
{
    static const yaml_json_opts opts = {.typed_scalars = 1, .aliases = 0};
    char why[512];
    if (yaml_json_parse(text, len, &opts, out, why, sizeof why) != 0)
        return fail(c, "%s", why);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Parsing a document                                                        */

/* JSON if it starts with '{' and parses as JSON, YAML otherwise. *out is the
 * tree (caller deletes), or NULL for an empty document. */
static int parse_document(const load_ctx *c, const char *text, size_t len, cJSON **out)
{
    const char *nul = memchr(text, '\0', len);
    if (nul)
        return fail(c, "the config contains a NUL byte at byte %zu", (size_t)(nul - text));
    char *buf = dup_range(text, len); /* cJSON wants a NUL-terminated buffer */
    if (!buf)
        return fail(c, "out of memory");

    size_t i = 0;
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0)
        i = 3;
    while (i < len && isspace((unsigned char)buf[i]))
        i++;

    int rc = 0;
    if (i < len && buf[i] == '{') {
        const char *end = NULL;
        cJSON *j = cJSON_ParseWithLengthOpts(buf, len + 1, &end, 1);
        if (j) {
            *out = j;
        } else {
            /* Not JSON; YAML flow style ({model: {dim: 32}}) may still read it. */
            size_t at = end && end >= buf ? (size_t)(end - buf) : 0;
            load_ctx quiet = {c->origin, NULL, 0};
            cJSON *y = NULL;
            if (yaml_to_json(&quiet, buf, len, &y) == 0 && y)
                *out = y;
            else {
                cJSON_Delete(y);
                rc = fail(c, "invalid JSON near byte %zu", at);
            }
        }
    } else {
        rc = yaml_to_json(c, buf, len, out);
    }
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Public API                                                                */

int config_preset(model_config *m, const char *name)
{
    if (m == NULL || name == NULL)
        return -1;
    for (size_t i = 0; i < N_PRESETS; i++) {
        const preset_def *p = &presets[i];
        if (strcmp(p->name, name) != 0)
            continue;
        set_str(m->preset, sizeof m->preset, p->name);
        m->image_size = p->image_size;
        m->patch_size = p->patch_size;
        m->channels = p->channels;
        m->dim = p->dim;
        m->depth = p->depth;
        m->heads = p->heads;
        m->mlp_ratio = p->mlp_ratio;
        m->num_classes = p->num_classes;
        return 0;
    }
    return -1;
}

/* Writes the row's default into its field (DEF_PRESET and DEF_UNSET: the
 * field keeps what it holds: the preset's value, or zero). */
static void set_default(vit_job_config *cfg, const config_key *k)
{
    if (k->dflt.from != DEF_KEY)
        return;
    char *field = (char *)cfg + k->off;
    const key_default *d = &k->dflt;
    switch (k->type) {
    case KT_INT:
    case KT_BOOL:
    case KT_ENUM:
        *(int *)(void *)field = (int)d->num;
        break;
    case KT_LONG:
        *(long *)(void *)field = (long)d->num;
        break;
    case KT_U64:
        *(unsigned long long *)(void *)field = (unsigned long long)d->num;
        break;
    case KT_DOUBLE:
        *(double *)(void *)field = d->num;
        break;
    case KT_PAIR:
        *(double *)(void *)field = d->num;
        *(double *)(void *)((char *)cfg + k->off2) = d->num2;
        break;
    case KT_VEC: /* only unset (ROW_VEC): config_defaults' memset left it so */
    case KT_STRS: /* none (ROW_STRS) */
        break;
    case KT_STRING:
        set_str(field, k->size, d->str ? d->str : "");
        break;
    case KT_PRESET:
        config_preset(&cfg->model, d->str ? d->str : "");
        break;
    }
}

void config_defaults(vit_job_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    /* in table order: model.preset, the first row, fills the dims that come from it */
    for (size_t i = 0; i < N_KEYS; i++)
        set_default(cfg, &config_keys[i]);
    cfg->world_size = 1;
}

int config_load_string(vit_job_config *cfg, const char *text, size_t len, const char *origin,
                       char *err, size_t errlen)
{
    const load_ctx c = {origin ? origin : "<string>", err, errlen};
    if (cfg == NULL || (text == NULL && len > 0))
        return fail(&c, "internal error: no config or no text");

    cJSON *root = NULL;
    int rc = parse_document(&c, text ? text : "", len, &root);
    if (rc)
        return rc;
    if (root == NULL)
        return fail(&c, "the config is empty; expected the spec or a ViTJob manifest");

    vit_job_config *tmp = malloc(sizeof *tmp);
    if (!tmp) {
        cJSON_Delete(root);
        return fail(&c, "out of memory");
    }
    memcpy(tmp, cfg, sizeof *tmp);
    rc = apply_document(&c, tmp, root);
    if (rc == 0)
        memcpy(cfg, tmp, sizeof *cfg);
    free(tmp);
    cJSON_Delete(root);
    return rc;
}

int config_load_file(vit_job_config *cfg, const char *path, char *err, size_t errlen)
{
    const load_ctx c = {path ? path : "<null>", err, errlen};
    if (path == NULL)
        return fail(&c, "cannot read config: no path given");

    buf text = {.max = FILE_MAX_BYTES};
    int rc;
    char why[FILE_PATH_MAX + 256];
    if (file_read(&text, path, why, sizeof why) != 0) {
        /* fail's message names the path (its origin) already */
        rc = fail(&c, "cannot read config: %s", file_reason(why, path));
        goto out;
    }
    rc = config_load_string(cfg, text.data ? text.data : "", text.len, path, err, errlen);
out:
    buf_free(&text);
    return rc;
}

/* "a,b" or "[a, b]" (each item trimmed; "" and "[]": none) as an array of
 * strings; NULL when out of memory. */
static cJSON *string_list(char *t)
{
    size_t n = strlen(t);
    if (n >= 2 && t[0] == '[' && t[n - 1] == ']') {
        t[n - 1] = '\0';
        t++;
    }
    cJSON *v = cJSON_CreateArray();
    char *body = dup_trimmed(t);
    for (char *p = body; v && body && body[0];) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        char *part = dup_trimmed(p);
        cJSON *e = part ? cJSON_CreateString(part) : NULL;
        free(part);
        if (!e || !cJSON_AddItemToArray(v, e)) {
            cJSON_Delete(e);
            cJSON_Delete(v);
            v = NULL;
        }
        if (!comma) break;
        p = comma + 1;
    }
    if (!body) {
        cJSON_Delete(v);
        v = NULL;
    }
    free(body);
    return v;
}

/* Text of a --set value as the cJSON value a document would have held. */
static cJSON *value_from_text(const config_key *k, const char *text)
{
    if (k->type == KT_STRING || k->type == KT_ENUM || k->type == KT_PRESET)
        return cJSON_CreateString(text); /* as-is */

    char *t = dup_trimmed(text);
    if (!t)
        return NULL;
    cJSON *v = NULL;
    double d;
    if (k->type == KT_BOOL) {
        if (strcmp(t, "true") == 0)
            v = cJSON_CreateTrue();
        else if (strcmp(t, "false") == 0)
            v = cJSON_CreateFalse();
        else
            v = cJSON_CreateString(t);
    } else if (k->type == KT_STRS || (k->type == KT_VEC && (t[0] == '\0' || strcmp(t, "null") == 0))) {
        if (k->type == KT_STRS) /* "a,b" or "[a, b]"; "" or "[]": none */
            v = string_list(t);
        else
            v = cJSON_CreateNull(); /* "data.mean=": back to the key's default */
    } else if (k->type == KT_PAIR || k->type == KT_VEC) {
        /* "0.9,0.95" or "[0.9, 0.95]"; "0.5" or "[0.5]" */
        char *body = t;
        size_t n = strlen(body);
        if (n >= 2 && body[0] == '[' && body[n - 1] == ']') {
            body[n - 1] = '\0';
            body++;
        }
        while (isspace((unsigned char)*body))
            body++;
        v = cJSON_CreateArray();
        const char *p = body;
        while (v && body[0]) { /* "[]": no numbers */
            const char *comma = strchr(p, ',');
            const char *end = comma ? comma : p + strlen(p);
            char *raw = dup_range(p, (size_t)(end - p));
            char *part = raw ? dup_trimmed(raw) : NULL;
            free(raw);
            cJSON *e = NULL;
            if (part)
                e = parse_decimal(part, &d) == 0 ? cJSON_CreateNumber(d) : cJSON_CreateString(part);
            free(part);
            if (!e || !cJSON_AddItemToArray(v, e)) {
                cJSON_Delete(e);
                cJSON_Delete(v);
                v = NULL;
                break;
            }
            if (!comma)
                break;
            p = comma + 1;
        }
    } else { /* numbers */
        v = parse_decimal(t, &d) == 0 ? cJSON_CreateNumber(d) : cJSON_CreateString(t);
    }
    free(t);
    return v;
}

int config_set(vit_job_config *cfg, const char *assignment, char *err, size_t errlen)
{
    const load_ctx c = {"--set", err, errlen};
    if (cfg == NULL || assignment == NULL)
        return fail(&c, "internal error: no config or no assignment");
    const char *eq = strchr(assignment, '=');
    if (eq == NULL) {
        char q[200];
        quote(q, sizeof q, assignment);
        return fail(&c, "expected key=value, got %s", q);
    }
    char *raw_key = dup_range(assignment, (size_t)(eq - assignment));
    char *key = raw_key ? dup_trimmed(raw_key) : NULL;
    free(raw_key);
    if (!key)
        return fail(&c, "out of memory");

    int rc;
    const config_key *k = find_key(key);
    if (k == NULL) {
        if (is_section(key))
            rc = fail(&c, "%s is a section; set one of its keys, e.g. %s.<key>=value", key, key);
        else
            rc = fail_unknown(&c, key, 0);
        free(key);
        return rc;
    }
    free(key);

    cJSON *v = value_from_text(k, eq + 1);
    if (v == NULL)
        return fail(&c, "out of memory");
    vit_job_config *tmp = malloc(sizeof *tmp);
    if (!tmp) {
        cJSON_Delete(v);
        return fail(&c, "out of memory");
    }
    memcpy(tmp, cfg, sizeof *tmp);
    rc = apply_value(&c, tmp, k, v);
    if (rc == 0)
        memcpy(cfg, tmp, sizeof *cfg);
    free(tmp);
    cJSON_Delete(v);
    return rc;
}

int config_mlp_hidden(const model_config *m)
{
    return (int)lround((double)m->dim * m->mlp_ratio);
}

int config_data_norm(const vit_job_config *cfg, double mean[CONFIG_DATA_CHANNELS_MAX],
                     double std[CONFIG_DATA_CHANNELS_MAX])
{
    static const double imagenet_mean[3] = {0.485, 0.456, 0.406};
    static const double imagenet_std[3] = {0.229, 0.224, 0.225};
    const int n = cfg->model.channels;
    if (n < 1 || n > CONFIG_DATA_CHANNELS_MAX)
        return 0;
    const data_config *d = &cfg->data;
    for (int i = 0; i < n; i++) {
        mean[i] = d->mean_n == n ? d->mean[i] : n == 3 ? imagenet_mean[i] : 0.5;
        std[i] = d->std_n == n ? d->std[i] : n == 3 ? imagenet_std[i] : 0.5;
    }
    return n;
}

int config_accum_steps(const vit_job_config *cfg)
{
    long long per_step = (long long)cfg->training.micro_batch_size * cfg->world_size;
    if (per_step <= 0)
        return 0;
    return (int)(cfg->training.global_batch_size / per_step);
}

/* A [min, max] pair: min <= max. */
static int validate_ordered(const load_ctx *c, const char *path, double lo, double hi)
{
    if (lo <= hi)
        return 0;
    char a[64], b[64];
    fmt_num(a, sizeof a, lo);
    fmt_num(b, sizeof b, hi);
    return fail(c, "%s=[%s, %s]: the minimum %s exceeds the maximum %s", path, a, b, a, b);
}

/* data.randAugment parses (api/randaug_spec.c), and it and data.randomErasing
 * are asked for only where they apply: the loader's training augmentation. */
static int validate_augment(const load_ctx *c, const data_config *d)
{
    randaug_spec ra;
    char why[1024];
    if (randaug_spec_parse(d->rand_augment, "data.randAugment", &ra, why, sizeof why) != 0)
        return fail(c, "%s", why);
    const char *on = ra.enabled ? "data.randAugment" : d->random_erasing > 0 ? "data.randomErasing"
                                                                             : NULL;
    if (!on)
        return 0;
    if (d->format == DATA_FASHION_MNIST)
        return fail(c, "%s does not fit data.format=fashion-mnist: it applies to webdataset and "
                       "imagefolder images (fashion-mnist's augmentation is its padded crop and flip)",
                    on);
    if (!d->augment)
        return fail(c, "%s needs data.augment=true: it follows the training augmentation's crop "
                       "and flip",
                    on);
    return 0;
}

/* data.mean or data.std, when given: one number per channel. */
static int validate_per_channel(const load_ctx *c, const char *path, int n, int channels)
{
    if (n == 0 || n == channels)
        return 0;
    return fail(c, "%s has %d number%s but model.channels=%d: give one per channel, or leave "
                   "%s out for the default", path, n, n == 1 ? "" : "s", channels, path);
}

/* imagefolder reads files, not objects. */
static int validate_local(const load_ctx *c, const char *path, const char *uri)
{
    if (strncmp(uri, "s3://", 5) != 0)
        return 0;
    char q[200];
    quote(q, sizeof q, uri);
    return fail(c, "%s=%s: imagefolder reads a local folder or mounted volume; write webdataset "
                   "shards with vitjob-worker shards for S3", path, q);
}

/* The checks of webdataset and imagefolder: RGB or grayscale, the
 * normalisation per channel, imagefolder's URIs local. */
static int validate_images(const load_ctx *c, const vit_job_config *cfg)
{
    const model_config *m = &cfg->model;
    const data_config *d = &cfg->data;
    const char *fmt = config_enum_name("data.format", (int)d->format);
    if (m->channels != 1 && m->channels != 3)
        return fail(c, "model.channels=%d does not fit data.format=%s: images are decoded to RGB "
                       "(3 channels) or grayscale (1), so model.channels must be 3 or 1",
                    m->channels, fmt);
    int rc;
    if ((rc = validate_per_channel(c, "data.mean", d->mean_n, m->channels)) ||
        (rc = validate_per_channel(c, "data.std", d->std_n, m->channels)))
        return rc;
    if (d->format == DATA_IMAGEFOLDER &&
        ((rc = validate_local(c, "data.uri", d->uri)) ||
         (rc = validate_local(c, "data.testUri", d->test_uri))))
        return rc;
    return 0;
}

/* data.mixup, data.cutmix and their keys (worker/data/mixup.h): the mode
 * built, cutmixMinMax as [min, max] with room for a box size, and an even
 * micro-batch (timm's Mixup pairs each sample with the batch reversed). */
static int validate_mixup(const load_ctx *c, const vit_job_config *cfg)
{
    const data_config *d = &cfg->data;
    if (d->mixup_mode != MIXUP_MODE_BATCH)
        return fail(c, "data.mixupMode=%s is not implemented: only batch (one draw per "
                       "micro-batch, timm's default)",
                    config_enum_name("data.mixupMode", (int)d->mixup_mode));
    if (d->cutmix_minmax_n == 2) {
        int rc = validate_ordered(c, "data.cutmixMinMax", d->cutmix_minmax[0],
                                  d->cutmix_minmax[1]);
        if (rc)
            return rc;
        const int S = cfg->model.image_size;
        const int lo = (int)(S * d->cutmix_minmax[0]), hi = (int)(S * d->cutmix_minmax[1]);
        if (lo >= hi) {
            char a[64], b[64];
            fmt_num(a, sizeof a, d->cutmix_minmax[0]);
            fmt_num(b, sizeof b, d->cutmix_minmax[1]);
            return fail(c, "data.cutmixMinMax=[%s, %s] leaves no box size at model.imageSize=%d: "
                           "the sides are drawn from [int(%d x %s), int(%d x %s)) = [%d, %d)",
                        a, b, S, S, a, S, b, lo, hi);
        }
    }
    const int on = d->mixup > 0 || d->cutmix > 0 || d->cutmix_minmax_n > 0;
    if (on && cfg->training.micro_batch_size % 2 != 0)
        return fail(c, "training.microBatchSize=%d is odd: data.mixup and data.cutmix pair each "
                       "sample with the micro-batch reversed (timm's Mixup), which needs an even "
                       "micro-batch", cfg->training.micro_batch_size);
    return 0;
}

int config_validate(const vit_job_config *cfg, char *err, size_t errlen)
{
    const load_ctx c = {NULL, err, errlen};
    if (cfg == NULL)
        return fail(&c, "internal error: no config");

    /* Every field on its own, with the same checks as a file (catches
     * fields that code has set directly). */
    vit_job_config *scratch = malloc(sizeof *scratch);
    if (!scratch)
        return fail(&c, "out of memory");
    memcpy(scratch, cfg, sizeof *scratch);
    int rc = 0;
    for (size_t i = 0; i < N_KEYS && rc == 0; i++) {
        const config_key *k = &config_keys[i];
        if ((k->type == KT_STRING || k->type == KT_PRESET) &&
            memchr((const char *)cfg + k->off, '\0', k->size) == NULL) {
            rc = fail(&c, "%s: string is not NUL-terminated", k->path);
            break;
        }
        cJSON *v = field_to_json(cfg, k, 0);
        rc = v ? apply_value(&c, scratch, k, v) : fail(&c, "out of memory");
        cJSON_Delete(v);
    }
    free(scratch);
    if (rc)
        return rc;

    const model_config *m = &cfg->model;
    const training_config *t = &cfg->training;
    const optimizer_config *o = &t->optimizer;

    if (m->dim % m->heads != 0)
        return fail(&c, "model.dim=%d is not divisible by model.heads=%d", m->dim, m->heads);
    if (m->image_size % m->patch_size != 0)
        return fail(&c, "model.imageSize=%d is not divisible by model.patchSize=%d", m->image_size,
                    m->patch_size);
    if (config_mlp_hidden(m) < 1) {
        char r[64];
        fmt_num(r, sizeof r, m->mlp_ratio);
        return fail(&c, "model.dim=%d * model.mlpRatio=%s gives an MLP hidden width of %d; it must be >= 1",
                    m->dim, r, config_mlp_hidden(m));
    }

    if (cfg->data.format == DATA_FASHION_MNIST) {
        if (m->image_size != 28)
            return fail(&c, "model.imageSize=%d does not fit data.format=fashion-mnist: "
                            "Fashion-MNIST images are 28x28x1, so model.imageSize must be 28",
                        m->image_size);
        if (m->channels != 1)
            return fail(&c, "model.channels=%d does not fit data.format=fashion-mnist: "
                            "Fashion-MNIST images are 28x28x1, so model.channels must be 1",
                        m->channels);
        if (m->num_classes < 10)
            return fail(&c, "model.numClasses=%d does not fit data.format=fashion-mnist: "
                            "Fashion-MNIST has 10 classes, so model.numClasses must be >= 10",
                        m->num_classes);
    } else {
        rc = validate_images(&c, cfg);
        if (rc)
            return rc;
    }
    if ((rc = validate_ordered(&c, "data.scale", cfg->data.scale_min, cfg->data.scale_max)) ||
        (rc = validate_ordered(&c, "data.ratio", cfg->data.ratio_min, cfg->data.ratio_max)) ||
        (rc = validate_mixup(&c, cfg)) ||
        (rc = validate_augment(&c, &cfg->data)))
        return rc;

    if (cfg->world_size < 1)
        return fail(&c, "world size %d is invalid; it must be >= 1", cfg->world_size);
    long long per_step = (long long)t->micro_batch_size * cfg->world_size;
    if (t->global_batch_size % per_step != 0)
        return fail(&c, "training.globalBatchSize=%d is not divisible by training.microBatchSize=%d "
                        "x world size %d = %lld",
                    t->global_batch_size, t->micro_batch_size, cfg->world_size, per_step);
    if (t->steps == 0 && t->epochs == 0)
        return fail(&c, "training.steps=0 and training.epochs=0: set one of them to a positive number");
    if (t->steps > 0 && o->warmup_steps > t->steps)
        return fail(&c, "training.optimizer.warmupSteps=%d exceeds training.steps=%ld",
                    o->warmup_steps, t->steps);
    if (o->min_lr > o->lr) {
        char a[64], b[64];
        fmt_num(a, sizeof a, o->min_lr);
        fmt_num(b, sizeof b, o->lr);
        return fail(&c, "training.optimizer.minLr=%s exceeds training.optimizer.lr=%s", a, b);
    }

    const char *ck = cfg->checkpoint.uri;
    if (ck[0] && strncmp(ck, "s3://", 5) != 0 && strncmp(ck, "file://", 7) != 0) {
        char q[200];
        quote(q, sizeof q, ck);
        return fail(&c, "checkpoint.uri=%s must start with s3:// or file://", q);
    }
    return 0;
}

char *config_to_json(const vit_job_config *cfg)
{
    if (cfg == NULL)
        return NULL;
    cJSON *root = cJSON_CreateObject();
    char *out = NULL;
    if (!root)
        return NULL;
    for (size_t i = 0; i < N_KEYS; i++) {
        const config_key *k = &config_keys[i];
        /* Walk or create the sections of the path, then add the leaf. */
        cJSON *parent = root;
        const char *p = k->path;
        const char *dot;
        while ((dot = strchr(p, '.')) != NULL) {
            char name[PATH_MAX_LEN];
            snprintf(name, sizeof name, "%.*s", (int)(dot - p), p);
            cJSON *sec = cJSON_GetObjectItemCaseSensitive(parent, name);
            if (!sec) {
                sec = cJSON_AddObjectToObject(parent, name);
                if (!sec)
                    goto out;
            }
            parent = sec;
            p = dot + 1;
        }
        cJSON *v = field_to_json(cfg, k, 1);
        if (!v || !cJSON_AddItemToObject(parent, p, v)) {
            cJSON_Delete(v);
            goto out;
        }
    }
    out = cJSON_PrintUnformatted(root);
out:
    cJSON_Delete(root);
    return out;
}

cJSON *config_describe(void)
{
    vit_job_config d;
    config_defaults(&d);
    cJSON *out = cJSON_CreateArray();
    for (size_t i = 0; out && i < N_KEYS; i++) {
        const config_key *k = &config_keys[i];
        cJSON *row = cJSON_CreateObject();
        if (!row || !cJSON_AddItemToArray(out, row)) {
            cJSON_Delete(row);
            cJSON_Delete(out);
            return NULL;
        }
        static const char *const types[] = {
            [KT_INT] = "integer", [KT_LONG] = "integer", [KT_U64] = "integer",
            [KT_DOUBLE] = "number", [KT_BOOL] = "boolean", [KT_STRING] = "string",
            [KT_ENUM] = "string", [KT_PAIR] = "array", [KT_VEC] = "array",
            [KT_PRESET] = "string", [KT_STRS] = "array"};
        const int array = k->type == KT_PAIR || k->type == KT_VEC;
        int ok = cJSON_AddStringToObject(row, "path", k->path) &&
                 cJSON_AddStringToObject(row, "type", types[k->type]) != NULL;
        if (k->type <= KT_DOUBLE || array) {
            ok = ok && cJSON_AddNumberToObject(row, "minimum", k->min) &&
                 cJSON_AddNumberToObject(row, "maximum", k->max) &&
                 cJSON_AddBoolToObject(row, "exclusiveMinimum", (k->open & OPEN_MIN) != 0) &&
                 cJSON_AddBoolToObject(row, "exclusiveMaximum", (k->open & OPEN_MAX) != 0);
        }
        if (k->type == KT_ENUM || k->type == KT_PRESET) {
            cJSON *e = cJSON_AddArrayToObject(row, "enum");
            if (k->type == KT_ENUM)
                for (const char *const *c = k->choices; e && *c; c++)
                    cJSON_AddItemToArray(e, cJSON_CreateString(*c));
            else {
                for (size_t p = 0; e && p < sizeof presets / sizeof presets[0]; p++)
                    cJSON_AddItemToArray(e, cJSON_CreateString(presets[p].name));
                cJSON_AddItemToArray(e, cJSON_CreateString(""));
            }
            ok = ok && e;
        }
        static const char *const formats_of[] = {[KT_INT] = "int32", [KT_LONG] = "int64",
                                                 [KT_U64] = "int64", [KT_DOUBLE] = "double",
                                                 [KT_PAIR] = "double", [KT_VEC] = "double"};
        if (k->type <= KT_DOUBLE || array)
            ok = ok && cJSON_AddStringToObject(row, "format", formats_of[k->type]);
        if (k->type == KT_STRING)
            ok = ok && cJSON_AddNumberToObject(row, "maxLength", (double)(k->size - 1));
        if (array)
            ok = ok && cJSON_AddNumberToObject(row, "minItems", min_items(k)) &&
                 cJSON_AddNumberToObject(row, "maxItems", k->items);
        if (k->type == KT_STRS) /* items: strings of 1 to size/items - 1 bytes */
            ok = ok && cJSON_AddNumberToObject(row, "maxItems", k->items) &&
                 cJSON_AddStringToObject(row, "itemType", "string") &&
                 cJSON_AddNumberToObject(row, "maxLength",
                                         (double)(k->size / (size_t)k->items - 1));
        static const char *const from[] = {[DEF_KEY] = "key", [DEF_PRESET] = "preset",
                                           [DEF_UNSET] = "unset"};
        ok = ok && cJSON_AddStringToObject(row, "defaultFrom", from[k->dflt.from]) &&
             cJSON_AddStringToObject(row, "description", k->help ? k->help : "") &&
             cJSON_AddStringToObject(row, "readme", k->readme ? k->readme : "");
        if (k->kind)
            ok = ok && cJSON_AddStringToObject(row, "readmeType", k->kind);
        if (k->pattern)
            ok = ok && cJSON_AddStringToObject(row, "pattern", k->pattern);
        if (k->item_help)
            ok = ok && cJSON_AddStringToObject(row, "itemDescription", k->item_help);
        if (k->dflt_words)
            ok = ok && cJSON_AddStringToObject(row, "defaultWords", k->dflt_words);
        cJSON *v = field_to_json(&d, k, 0);
        if (!ok || !v || !cJSON_AddItemToObject(row, "default", v)) {
            cJSON_Delete(v);
            cJSON_Delete(out);
            return NULL;
        }
    }
    return out;
}

const char *config_enum_name(const char *path, int value)
{
    for (size_t i = 0; path && i < N_KEYS; i++) {
        const config_key *k = &config_keys[i];
        if (k->type != KT_ENUM || strcmp(k->path, path) != 0)
            continue;
        for (int j = 0; k->choices[j]; j++)
            if (j == value)
                return k->choices[j];
    }
    return "?";
}
