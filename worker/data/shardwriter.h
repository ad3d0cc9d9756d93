/* worker/data/shardwriter.h - webdataset tar shards written from an image
 * folder or the Fashion-MNIST IDX files, byte for byte the same every time.
 *
 * Owns: telling the two kinds of source apart, listing an image folder
 * (torchvision's ImageFolder layout) and giving each sample its key and
 * label, encoding IDX pixels (encode.h), the seeded permutation the samples
 * are dealt in, cutting shards by sample count and byte size, the shard
 * names of a printf pattern and the brace pattern that names them all
 * (shards.h's notation), and writing each shard whole: to a local file
 * atomically (lib/file.h) or to S3 (lib/s3.h).
 * Must not: include anything of the worker outside worker/data, change an
 * image's bytes (a folder's images are decoded only to check them), or keep
 * more than one shard (and one sample) in memory.
 *
 * Sources (SRC, a directory: a path or file:// URI):
 *   IDX: SRC holds some "*-images-idx3-ubyte[.gz]" file. The split's images
 *     and labels are read (data.h) and each image encoded as grayscale JPEG
 *     (quality, no subsampling) or PNG. Key: the sample's index in the
 *     split, "%06d"; members KEY.jpg (or .png) and KEY.cls.
 *   Image folder: otherwise, when SRC has subdirectories. Each is a class
 *     (index = its place among the class folder names in bytewise order,
 *     hidden ones included, as torchvision's ImageFolder has it); every
 *     file under it, at any depth, named .jpg, .jpeg or .png in any case is
 *     a sample, copied byte for byte; other files, and files beside the
 *     class folders, are skipped and counted. Key: the path under SRC
 *     without the extension, "<class>/<sub>/<stem>", where dots in the
 *     stem become '_' (webdataset cuts the key at the basename's first
 *     dot); members KEY.<extension in lower case> and KEY.cls. Two files
 *     with the same key (x.jpg beside x.png, a.b.jpg beside a_b.jpg) are
 *     refused, naming both. A file whose bytes are neither JPEG nor PNG is
 *     skipped with a warning and counted. Every other image is decoded
 *     (decode.h) before it is packed: one that cannot be (truncated,
 *     corrupt) is refused, VJ_ERR_DATA with decode.h's message and the
 *     advice of skip_bad, or with skip_bad skipped with a warning and
 *     counted (skipped and undecodable). Shards already written stay.
 *   Within a sample the members go in bytewise order of their extensions
 *   (".cls" first), as webdataset's ShardWriter writes them; .cls holds the
 *   label in decimal, nothing else.
 *
 * Order and shards: the samples (IDX in index order, a folder in bytewise
 * order of the path under SRC) are permuted once with a Fisher-Yates
 * shuffle drawn from rng.h's stream (seed, SHARDWRITER_STREAM, n) unless
 * no_shuffle, then dealt into shards in turn. A shard is closed when it
 * holds samples_per_shard samples, or when the next sample would take it
 * over shard_bytes (the tar file's size, end blocks included); a sample
 * larger than that alone goes into a shard of its own. With both limits,
 * whichever is reached first.
 *
 * Output pattern: a bare path, file:// path or s3://bucket/key with one
 * "%d" or "%0Nd" (N 1..18) in it ("%%" is a literal '%'; braces beside it
 * are refused: the brace pattern printed at the end could not hold them);
 * or a brace pattern as data.uri reads it (shards.h), which names the
 * shards itself: exactly its N names are written, in its order, sample i
 * of the n (after the permutation) going to shard i * N / n, so that the
 * counts differ by one at most. A brace pattern refuses samples_per_shard
 * and shard_bytes, '%', more names than samples, and a name twice; a
 * shard left empty because every file dealt to it was skipped fails the
 * run (VJ_ERR_DATA). On S3 the number (or the braces) must be in the key.
 * The data_uri reported is absolute: a relative path is joined to the
 * working directory. Local shards are written to a
 * temporary file, fsynced and renamed (lib/file.h); missing directories
 * are created. S3 shards go up with one s3_put each (credentials from the
 * environment, AWS_CA_BUNDLE, AWS_MAX_ATTEMPTS).
 *
 * Errors: shardwriter_run returns a vj_err (api/exitcode.h) with one line
 * naming the path, URI or key: VJ_ERR_USAGE (options, pattern, an IDX
 * option given for an image folder), VJ_ERR_DATA (SRC missing or
 * unreadable, not a directory, neither kind, a class folder without
 * images, an empty data set, two files with one key, malformed IDX),
 * VJ_ERR_OUTPUT (a shard that cannot be written, S3 refusing), VJ_ERR_IO
 * (disk full, an I/O error, an S3 failure that may pass),
 * VJ_ERR_OUT_OF_MEMORY.
 */
#ifndef VITJOB_SHARDWRITER_H
#define VITJOB_SHARDWRITER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "encode.h"

#define SHARDWRITER_DEFAULT_SAMPLES 10000L
#define SHARDWRITER_DEFAULT_QUALITY 95
/* the rng.h stream coordinate of the permutation (ASCII "shards") */
#define SHARDWRITER_STREAM 0x736861726473ull

typedef struct {
    const char *from;         /* SRC: a directory, path or file:// */
    const char *out;          /* the shard name pattern */
    long samples_per_shard;   /* 0: SHARDWRITER_DEFAULT_SAMPLES when shard_bytes is 0, else none */
    uint64_t shard_bytes;     /* 0: no byte limit */
    encode_format format;     /* IDX only */
    int quality;              /* IDX JPEG only; 0: SHARDWRITER_DEFAULT_QUALITY */
    const char *split;        /* IDX only; NULL: "train" */
    int idx_options_given;    /* format, quality or split was asked for: a folder refuses them */
    int no_shuffle;           /* keep the source's order */
    uint64_t seed;            /* the permutation's seed */
    const char *endpoint;     /* S3 endpoint URL; NULL or "": AWS */
    FILE *report;             /* one line per shard and the summary; NULL: none */
    int skip_bad;             /* folder images that cannot be decoded: skipped, not refused */
} shardwriter_options;

typedef struct {
    long shards, samples;
    uint64_t bytes;           /* all shards together */
    long skipped;             /* files not taken (not an image, not JPEG/PNG bytes, undecodable) */
    long undecodable;         /* of skipped: images that could not be decoded (skip_bad) */
    int classes;              /* IDX: the largest label + 1; folder: the class folders */
    char data_uri[6000];       /* the brace pattern naming every shard written, absolute */
} shardwriter_result;

/* Writes the shards o asks for; *res (may be NULL) says what was written.
 * Returns VJ_OK or a vj_err with a message in err (see above). */
int shardwriter_run(const shardwriter_options *o, shardwriter_result *res, char *err,
                    size_t errlen);

/* A size: decimal digits with an optional suffix, k/K M G T (powers of
 * 1000) or Ki Mi Gi Ti (powers of 1024), as Kubernetes quantities have
 * them ("1000000", "64M", "1G", "512Ki"). 0 with *out > 0, or -1. */
int shardwriter_parse_size(const char *s, uint64_t *out);

/* A parsed output pattern: the text around its one number. */
typedef struct {
    char head[4096], tail[1024]; /* "%%" already made '%' */
    int width;                   /* N of "%0Nd"; 0 for "%d" */
} shardwriter_pattern;

/* Parses pattern; 0, or -1 with err naming it and what is wrong. */
int shardwriter_pattern_parse(shardwriter_pattern *p, const char *pattern, char *err,
                              size_t errlen);
/* The name of shard i into out; -1 when it does not fit out, or when i has
 * more digits than the width (the brace pattern could not name it). */
int shardwriter_pattern_name(const shardwriter_pattern *p, long i, char *out, size_t len);
/* The brace pattern of shards 0..n-1 (n >= 1), e.g. "train-{000000..000005}.tar";
 * -1 when it does not fit out. */
int shardwriter_pattern_braces(const shardwriter_pattern *p, long n, char *out, size_t len);

#endif
