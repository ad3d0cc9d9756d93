/* api/config_keys.c - the config key table: THE one place a key is added.
 *
 * Owns: one row per key of the config file (config_keys): its dotted
 * camelCase path as in docs/design.md, its type, its bounds, its default,
 * the field of vit_job_config it fills (checked against the row's type at
 * compile time) and the words that document it (the CRD's description, the
 * README's row); the spellings of the enumerated keys; the model presets;
 * the spec and manifest keys the worker accepts and ignores. Defaults,
 * loading a file, applying `--set key=value`, validating and printing the
 * effective config all walk this table (api/config.c, api/config_load.c),
 * so a key exists in all five places or in none; the CRD's schema of the
 * key and the README's row for it are written from it too
 * (config_describe, api/config_schema.c, `make schema`).
 * Must not: hold functions. Rules between keys (dim % heads, the data format
 * against the model, ...) are code, not rows: config_validate in
 * api/config.c; the walking, parsing and checking of values are the
 * engine's (api/config.c, api/config_load.c). This file is the one
 * permitted to be long: it grows by a row per key.
 */
#include "config_keys.h"

#include <stddef.h>

#define JSON_EXACT_INT 9007199254740991.0 /* 2^53 - 1: largest integer a JSON number holds exactly */

#define DEF_NUM(x) {DEF_KEY, (x), 0, NULL}
#define DEF_BOOL(x) {DEF_KEY, (x), 0, NULL}
#define DEF_ENUM(x) {DEF_KEY, (x), 0, NULL}
#define DEF_STR(s) {DEF_KEY, 0, 0, (s)}
#define DEF_PAIR(a, b) {DEF_KEY, (a), (b), NULL}
#define FROM_PRESET {DEF_PRESET, 0, 0, NULL}
#define UNSET {DEF_UNSET, 0, 0, NULL}
#define FOLLOWS(x) {DEF_FOLLOWS, (x), 0, NULL} /* x unless config_finish adapts it */

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
/* f: a double array of at most NUMS_MAX (config_keys.h; the build fails on a
 * longer one); fn: its int count (0 = unset, the key's default) */
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
const config_key config_keys[] = {
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
    {ROW_BOOL("data.augment", data.augment, FOLLOWS(0)), .dflt_words = "by `format`",
     .help = "Training augmentation, drawn per (seed, epoch, sample). fashion-mnist: random crop "
             "(2 px zero padding) and horizontal flip; webdataset and imagefolder: "
             "RandomResizedCrop(scale, ratio) to imageSize and horizontal flip (p 0.5). Off: "
             "the evaluation transform. Unset: on for webdataset and imagefolder (timm's "
             "training transform), off for fashion-mnist.",
     .readme = "drawn per (seed, epoch, sample); fashion-mnist: random crop (2 px zero padding) + "
               "horizontal flip; else RandomResizedCrop(`scale`, `ratio`) + flip; off: the "
               "evaluation transform; unset: on for `webdataset` and `imagefolder` (timm's "
               "training transform), off for fashion-mnist"},
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
    {ROW_INT("training.globalBatchSize", training.global_batch_size, 1, 16777216, FOLLOWS(128)),
     .dflt_words = "128, rounded up to a multiple of `microBatchSize` x world size",
     .help = "Images per optimizer step over all ranks; must be divisible by microBatchSize x "
             "world size. Unset: 128, rounded up to a multiple of microBatchSize x world size.",
     .readme = "images per optimizer step; divisible by microBatchSize x world size"},
    {ROW_INT("training.microBatchSize", training.micro_batch_size, 1, 65536, FOLLOWS(64)),
     .dflt_words = "64; with `globalBatchSize` given, its largest divisor per rank up to 64",
     .help = "Images per rank per forward/backward pass; gradient accumulation fills the rest of "
             "the global batch. Unset: 64, or with globalBatchSize given the largest divisor "
             "of globalBatchSize / world size up to 64 (an even one with mixup or cutmix on).",
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
    {ROW_DBL("training.optimizer.lr", training.optimizer.lr, 0, 10, OPEN_MIN, FOLLOWS(3e-3)),
     .dflt_words = "0.003 (`minLr` when larger)",
     .help = "Peak learning rate, in (0, 10]. Unset: 0.003, or minLr when that is larger.",
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
             FOLLOWS(50)),
     .dflt_words = "min(50, the run's steps)",
     .help = "Linear warmup, lr x (step+1)/warmupSteps; a given value must not exceed the run's "
             "steps. Unset: min(50, the run's steps) (a run of 50 steps or fewer warms up "
             "throughout).",
     .readme = "linear warmup lr x (step+1)/warmup; a given value must not exceed the run's "
               "steps"},
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
               "`AWS_REGION`, `AWS_SESSION_TOKEN` into the workers (ignored by the worker "
               "itself)"},
};
const size_t config_n_keys = sizeof config_keys / sizeof config_keys[0];
_Static_assert(sizeof config_keys / sizeof config_keys[0] <= CONFIG_KEYS_MAX,
               "more keys than CONFIG_KEYS_MAX (config_keys.h)");
_Static_assert(CONFIG_KEYS_MAX <= 8 * CONFIG_GIVEN_BYTES,
               "vit_job_config.given (config.h) has a bit for every key");

/* Spec keys that belong to the operator: accepted and ignored by the worker. */
const char *const config_operator_keys[] = {"replicas", "gpusPerReplica", "gpuMemory",
                                            "image",    "runPolicy",      "suspend",
                                            "template", "elastic",        NULL};
/* Manifest keys around the spec: ignored. */
const char *const config_manifest_keys[] = {"apiVersion", "kind", "metadata", "status", NULL};

/* config_preset (api/config.c) writes one into the model; model.preset's
 * spellings are these names and "" */
const preset_def config_presets[] = {
    {"vit_ti16", 224, 16, 3, 192, 12, 3, 4.0, 1000},
    {"vit_s16", 224, 16, 3, 384, 12, 6, 4.0, 1000},
    {"vit_b16", 224, 16, 3, 768, 12, 12, 4.0, 1000},
    {"vit_l16", 224, 16, 3, 1024, 24, 16, 4.0, 1000},
    {"vit_h14", 224, 14, 3, 1280, 32, 16, 4.0, 1000},
    {"vit_g14", 224, 14, 3, 1408, 40, 16, 48.0 / 11.0, 1000},
    {"fmnist_tiny", 28, 7, 1, 64, 4, 4, 4.0, 10},
    {"fmnist_small", 28, 4, 1, 128, 6, 4, 4.0, 10},
};
const size_t config_n_presets = sizeof config_presets / sizeof config_presets[0];
