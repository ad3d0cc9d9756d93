/* api/config.h - the ViTJob spec's worker part: the config of a training run.
 *
 * Owns: parsing the config file of docs/design.md (JSON or YAML; either the bare
 * spec {model, data, training, checkpoint} or a whole ViTJob manifest, whose
 * `spec` is used), `--set key=value` overrides, model presets, defaults and
 * validation. Configuration is table-driven: one row per key (dotted path,
 * type, bounds, default, target field, and the words the CRD and the README
 * say of it: api/config_schema.c writes those files' parts from the table).
 * The rows are api/config_keys.c's (the one place a key is added); reading
 * text (files, --set) is api/config_load.c's; the rest, api/config.c's.
 * Must not: touch data files, allocate model memory, or exit the process.
 *
 * Errors: every function returns 0 on success or a vj_err (api/exitcode.h), and
 * writes a one-line message naming the file, key and value into `err`.
 */
#ifndef VITJOB_CONFIG_H
#define VITJOB_CONFIG_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "contract.h"
#include "exitcode.h"

#define CONFIG_STR 512
#define CONFIG_FREEZE_MAX 32 /* training.freeze: at most this many prefixes ... */
#define CONFIG_FREEZE_LEN 64 /* ... of at most 63 bytes each */

/* The keys with a fixed set of values, as values: in each enum the order of
 * the spellings in the spec table (api/config_keys.c), which maps one to the other. */
typedef enum { DATA_FASHION_MNIST, DATA_WEBDATASET, DATA_IMAGEFOLDER } data_format; /* data.format */
typedef enum { INTERP_BILINEAR, INTERP_BICUBIC } interp_mode;                 /* data.interpolation */
typedef enum { PRECISION_FP32, PRECISION_BF16_MIXED, PRECISION_FP16_MIXED } precision_mode; /* training.precision */
typedef enum { SHARDING_NONE, SHARDING_GRAD_OP, SHARDING_FULL } sharding_mode; /* training.sharding */
typedef enum { OPTIMIZER_ADAMW } optimizer_kind;                  /* training.optimizer.name */
typedef enum { SCHEDULE_COSINE, SCHEDULE_CONSTANT } lr_schedule;  /* training.optimizer.schedule */
typedef enum { DEVICE_CPU, DEVICE_CUDA, DEVICE_AUTO } device_kind; /* training.device */
typedef enum { MIXUP_MODE_BATCH, MIXUP_MODE_PAIR, MIXUP_MODE_ELEM } mixup_mode; /* data.mixupMode */
typedef enum { ERASE_PIXEL, ERASE_CONST, ERASE_RAND } erase_mode; /* data.randomErasingMode */
typedef enum { INIT_HEAD_NEW, INIT_HEAD_KEEP } init_head_mode;    /* model.initHead */

typedef struct {
    char preset[64];      /* "" or a preset name; applied before the explicit keys */
    int image_size;       /* input height = width, pixels */
    int patch_size;       /* non-overlapping square patches */
    int channels;         /* input channels (1 for Fashion-MNIST) */
    int dim;              /* embedding width D */
    int depth;            /* transformer blocks */
    int heads;            /* attention heads; dim % heads == 0 */
    double mlp_ratio;     /* MLP hidden = round(dim * mlp_ratio) */
    int num_classes;
    char init[CONFIG_STR];/* "" or the weights to start from: a timm-named safetensors file
                           * (path, file:// or s3://) or a checkpoint (root or step folder) */
    init_head_mode init_head; /* model.initHead: a head of another class count in init gets
                               * timm's init (new) or is refused (keep) */
} model_config;

/* data.mean / data.std: at most this many numbers, one per channel */
#define CONFIG_DATA_CHANNELS_MAX 3

typedef struct {
    data_format format;
    char uri[CONFIG_STR];       /* fashion-mnist: a directory (file:///dir or /dir);
                                 * webdataset: a shard pattern, local or s3://;
                                 * imagefolder: a local directory */
    char test_uri[CONFIG_STR];  /* data.testUri: the evaluation split, named like uri; "" =
                                 * fashion-mnist: the t10k files beside uri; other formats:
                                 * no evaluation */
    char endpoint[CONFIG_STR];  /* data.endpoint: S3 endpoint for s3:// data; "" =
                                 * checkpoint.endpoint's, else AWS */
    int augment;                /* fashion-mnist: random crop (pad 2) + horizontal flip;
                                 * webdataset/imagefolder: RandomResizedCrop(scale, ratio) +
                                 * horizontal flip (p 0.5); off: the evaluation transform */
    double mean[CONFIG_DATA_CHANNELS_MAX], std[CONFIG_DATA_CHANNELS_MAX];
                                /* data.mean / data.std: one number per model.channels, in
                                 * pixel/255 units; */
    int mean_n, std_n;          /*   how many were given; 0 = the default: ImageNet's
                                 *   (0.485, 0.456, 0.406) / (0.229, 0.224, 0.225) for 3
                                 *   channels, 0.5 / 0.5 for 1 (config_data_norm) */
    double scale_min, scale_max;   /* data.scale: [0.08, 1] (RandomResizedCrop's area fraction) */
    double ratio_min, ratio_max;   /* data.ratio: [0.75, 1.3333333333333333] (aspect ratio) */
    char rand_augment[CONFIG_STR]; /* data.randAugment: timm's RandAugment string
                                    * ("rand-m9-mstd0.5-inc1", api/randaug_spec.h); "" = off */
    double random_erasing;         /* data.randomErasing: timm's RandomErasing probability,
                                    * [0, 1], default 0 = off */
    erase_mode random_erasing_mode; /* data.randomErasingMode: pixel (default) | const | rand */
    interp_mode interpolation;  /* data.interpolation: default bicubic */
    double crop_pct;            /* data.cropPct: (0, 1], default 0.875: evaluation resizes the
                                 * shorter side to imageSize / cropPct, then center-crops */
    int workers;                /* data.workers: decode threads; 0 = what the CPUs leave after
                                 * training.threads, at least 1; max 256 */
    int prefetch_batches;       /* data.prefetchBatches: ready micro-batches queued ahead,
                                 * 1..64, default 2 */
    int shuffle_buffer;         /* data.shuffleBuffer: samples per shuffled block, 1..1000000,
                                 * default 1000 */
    unsigned long long max_pixels; /* data.maxPixels: decompression-bomb limit, default
                                    * 89478485 (PIL's), >= 1 */
    double max_bad_fraction;    /* data.maxBadFraction: [0, 1], default 0.001 */
    /* timm's Mixup (worker/data/mixup.h): on when mixup > 0, cutmix > 0 or
     * cutmix_minmax is given */
    double mixup;               /* data.mixup: mixup alpha, >= 0, default 0 (off) */
    double cutmix;              /* data.cutmix: cutmix alpha, >= 0, default 0 (off) */
    double cutmix_minmax[2];    /* data.cutmixMinMax: [min, max] box side fractions; */
    int cutmix_minmax_n;        /*   0 = not given (rand_bbox from lambda), else 2 */
    double mixup_prob;          /* data.mixupProb: [0, 1], default 1 */
    double mixup_switch_prob;   /* data.mixupSwitchProb: [0, 1], default 0.5 */
    mixup_mode mixup_mode;      /* data.mixupMode: batch (pair, elem: refused) */
} data_config;

typedef struct {
    optimizer_kind name;
    double lr, weight_decay, beta1, beta2, eps;
    int warmup_steps;
    lr_schedule schedule;
    double min_lr;
    double grad_clip;     /* 0 = off */
    double layer_decay;   /* layerDecay: BEiT's layer-wise lr decay, timm's groups; 0 = off */
} optimizer_config;

typedef struct {
    double decay; /* training.ema.decay: 0 = off, else in (0, 1) */
    int warmup;   /* training.ema.warmup: timm ModelEmaV3's decay warmup (worker/train/ema.h) */
} ema_config;

typedef struct {
    long steps;           /* optimizer steps; 0 = derive from epochs */
    int epochs;           /* used when steps == 0 */
    int global_batch_size;
    int micro_batch_size; /* per rank; accumulation fills the rest */
    precision_mode precision;
    sharding_mode sharding;
    int activation_checkpointing;
    double drop_path;       /* stochastic depth's rate at the last block, [0, 1) */
    double label_smoothing; /* [0, 1): targets (1 - s) one-hot + s / numClasses */
    optimizer_config optimizer;
    ema_config ema;       /* training.ema */
    /* training.freeze: timm parameter-name prefixes whose parameters are
     * frozen (worker/train/freeze.h); freeze_n of them, 0 = none */
    char freeze[CONFIG_FREEZE_MAX][CONFIG_FREEZE_LEN];
    int freeze_n;
    unsigned long long seed;
    device_kind device;
    int rendezvous_timeout_seconds;
    int collective_timeout_seconds; /* a collective waiting longer: the peer is lost */
    int heartbeat_timeout_seconds;  /* no heartbeat this long: the peer is lost (heartbeat.h) */
    int threads;          /* 0 = what the CPU affinity and cgroup quota allow */
    int log_interval;     /* steps between progress lines */
    int report_interval_seconds; /* rank 0: least seconds between status.progress patches */
    int eval_interval;    /* steps between test-set evaluations; 0 = end only */
    char export_path[CONFIG_STR]; /* safetensors written at the end; "" = none */
} training_config;

typedef struct {
    char uri[CONFIG_STR];
    int interval_steps;
    int keep;
    char endpoint[CONFIG_STR];
    char credentials_secret[256];
} checkpoint_config;

/* vit_job_config.given: a bit per key of the table */
#define CONFIG_GIVEN_BYTES 32

typedef struct {
    model_config model;
    data_config data;
    training_config training;
    checkpoint_config checkpoint;
    int world_size;       /* VITJOB_REPLICAS x VITJOB_LOCAL_RANKS; 1 locally */
    /* The operator's keys of a ViTJob manifest's spec, as written (0 and "":
     * not written): the worker ignores them; `vitjob-worker plan` plans the
     * job they describe (replicas x gpusPerReplica ranks, gpuMemory each;
     * with spec.elastic, also at the sizes down to elastic.minReplicas) */
    struct {
        int replicas, gpus_per_replica;
        int min_replicas;   /* spec.elastic.minReplicas */
        char gpu_memory[32];
    } spec_scale;
    /* the keys a document or a --set wrote (a bit per row of the table, in
     * table order): config_finish adapts the defaults of the others that
     * follow another key (training.optimizer.warmupSteps, ...) */
    unsigned char given[CONFIG_GIVEN_BYTES];
} vit_job_config;

/* Fills `cfg` with the defaults (preset fmnist_tiny, Fashion-MNIST). */
void config_defaults(vit_job_config *cfg);

/* Parses a JSON or YAML file (chosen by content, not by extension) into cfg,
 * on top of whatever cfg holds. Unknown keys, wrong types and out-of-range
 * values are errors. Returns 0 or VJ_ERR_CONFIG. */
int config_load_file(vit_job_config *cfg, const char *path, char *err, size_t errlen);

/* Parses the same document from memory; `origin` names it in messages. */
int config_load_string(vit_job_config *cfg, const char *text, size_t len,
                       const char *origin, char *err, size_t errlen);

/* Applies one "dotted.key=value" override, e.g. "training.steps=100".
 * Arrays: "0.9,0.95" or "[0.9, 0.95]"; of data.mean and data.std also one
 * number ("0.5", "[0.5]"), and "" or "null": not given (the default). */
int config_set(vit_job_config *cfg, const char *assignment, char *err, size_t errlen);

/* Cross-field checks (dim % heads, imageSize % patchSize, batch divisibility,
 * the data format against the model: Fashion-MNIST's 28x28x1, 1 or 3
 * channels and data.mean/data.std per channel for webdataset and
 * imagefolder, imagefolder not on s3://; data.scale and data.ratio min <=
 * max; data.mixupMode batch, data.cutmixMinMax leaving a box size and an
 * even micro-batch with mixing on, ...). Call after all loads and sets. Returns 0 or VJ_ERR_CONFIG. */
int config_validate(const vit_job_config *cfg, char *err, size_t errlen);

/* Adapts the defaults that follow other keys, where the spec left them
 * unset (config_given), then validates (config_validate). Call once all
 * loads and sets are done and world_size is set; the worker and the
 * operator do, so that a default never refuses what the user wrote:
 *   training.optimizer.warmupSteps  min(50, training.steps) (steps 0: the
 *                                   run's steps, config_warmup_steps)
 *   training.optimizer.lr           max(0.003, minLr)
 *   training.microBatchSize         64, or the largest divisor of
 *                                   globalBatchSize / world size up to 64
 *                                   when that is given (even with mixing on)
 *   training.globalBatchSize        128 rounded up to a multiple of
 *                                   microBatchSize x world size
 *   data.augment                    on for webdataset and imagefolder
 *                                   (timm's training transform), off for
 *                                   fashion-mnist
 * A value the spec gave is kept as given and checked. Returns 0 or VJ_ERR_CONFIG. */
int config_finish(vit_job_config *cfg, char *err, size_t errlen);

/* 1 when a document or a --set gave the key `path` (a dotted path of the table). */
int config_given(const vit_job_config *cfg, const char *path);

/* The warmup steps of a run of total_steps steps: training.optimizer.warmupSteps
 * as given, else min(its default, total_steps). */
int config_warmup_steps(const vit_job_config *cfg, long total_steps);

/* Writes the preset's model dims into m (keeping m->init and m->init_head). Returns 0, or -1
 * if the name is unknown. Presets: vit_ti16 vit_s16 vit_b16 vit_l16 vit_h14
 * vit_g14 (timm's dims, 224x224x3, 1000 classes), fmnist_tiny, fmnist_small
 * (28x28x1, 10 classes). */
int config_preset(model_config *m, const char *name);

/* The normalisation a run uses: data.mean and data.std where given, else
 * the default for model.channels (ImageNet's for 3 channels, 0.5 / 0.5 for
 * 1; 0.5 for any other count). Fills mean[0..n) and std[0..n) and returns
 * n = model.channels when it is 1 to CONFIG_DATA_CHANNELS_MAX, else 0
 * (nothing written). Given numbers are used as they are: config_validate
 * has checked that there are model.channels of them. */
int config_data_norm(const vit_job_config *cfg, double mean[CONFIG_DATA_CHANNELS_MAX],
                     double std[CONFIG_DATA_CHANNELS_MAX]);

/* Number of micro-batches accumulated per optimizer step. */
int config_accum_steps(const vit_job_config *cfg);

/* MLP hidden width: round(dim * mlp_ratio). */
int config_mlp_hidden(const model_config *m);

/* Prints the effective config as JSON (for logs and reproducibility).
 * Caller frees the result with free(). */
char *config_to_json(const vit_job_config *cfg);

/* The key table itself, for api/config_schema.c (which writes the CRD's and
 * the README's parts from it) and the tests: an array, in table order, of
 *   path, type ("integer", "number", "boolean", "string", "array");
 *   format ("int32", "int64", "double"; of an array: its elements');
 *   minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, arrays);
 *   minItems, maxItems (arrays); maxLength (free strings: the capacity);
 *   enum (strings from a fixed set);
 *   default (as config_defaults sets it), defaultFrom ("key": the row's own,
 *     which the CRD repeats; "preset": the default preset's, and no CRD
 *     default; "unset": zero, "" or, of an array of 1 to N numbers, null:
 *     not given, whose meaning the description says; and no CRD default);
 *   description (the CRD's, without "Default X."), readme (the README's
 *     meaning column), and where the row has them readmeType (the README's
 *     type column where the type says too little, e.g. "path"), pattern
 *     (the CRD's), itemDescription (the CRD's, of an array's elements) and
 *     defaultWords (the README's default column where the default is no
 *     value of the key, e.g. "by `channels`").
 * Caller frees with cJSON_Delete; NULL on OOM. */
cJSON *config_describe(void);

/* The spelling of an enumerated key's value, e.g. ("training.precision",
 * PRECISION_BF16_MIXED) -> "bf16-mixed"; "?" for an unknown key or value. */
const char *config_enum_name(const char *path, int value);

#endif
