/* worker/data/wds.h - webdataset samples from a tar shard.
 *
 * Owns: grouping a shard's consecutive members by key (the path up to the
 * first dot of the basename: "dir/img_0001.jpg" and "dir/img_0001.cls" are
 * the sample "dir/img_0001" with extensions "jpg" and "cls"; the extension
 * is everything after that dot, as webdataset has it), and taking from each
 * sample its encoded image (extension jpg, jpeg or png, in any case) and
 * its label: the decimal integer of ".cls" (whitespace around it allowed),
 * else "label" of ".json" ({"label": N}, read with cJSON).
 * Must not: decode images (others do), know the training loop, or hold
 * more than one sample.
 *
 * A bad sample is reported and skipped, and the stream goes on: one with no
 * image, two images, an extension given twice, no label, a label that is
 * not an integer in [0, 2^31), or only extensions this reader does not know
 * (those beside an image and a label are ignored). A fault of the tar stream
 * itself (tar.h) ends it.
 */
#ifndef VITJOB_WDS_H
#define VITJOB_WDS_H

#include <stddef.h>
#include <stdint.h>

#include "tar.h"

typedef enum {
    WDS_ERROR = -1, /* the stream failed; err names the shard and offset; it stays failed */
    WDS_END = 0,    /* the shard ended properly */
    WDS_SAMPLE = 1, /* a good sample */
    WDS_BAD = 2     /* a bad sample, skipped: err names the shard, its key and offset */
} wds_status;

typedef struct {
    const char *key;             /* borrowed, valid until the next wds_next */
    const char *image_ext;       /* "jpg", "jpeg" or "png", as spelled in the shard */
    const unsigned char *image;  /* borrowed, image_size bytes */
    size_t image_size;
    int32_t label;
    uint64_t offset;             /* where its first member's header starts */
} wds_sample;

typedef struct wds_reader wds_reader;

/* Samples of the tar that fn(ctx, ...) yields (tar_reader_new's arguments:
 * shard names it in messages, ctx is borrowed, max_member bounds each
 * member). NULL only when out of memory. Freed with wds_reader_free. */
wds_reader *wds_reader_new(const char *shard, tar_read_fn fn, void *ctx, uint64_t max_member);
void wds_reader_free(wds_reader *w); /* accepts NULL */
/* The stream begins at byte off of the shard, at a sample's first header
 * (a reader resumed where a sample started): tar_reader_start_at. */
void wds_reader_start_at(wds_reader *w, uint64_t off);

/* The next sample in *s (when WDS_SAMPLE), or why not (err, for WDS_BAD and
 * WDS_ERROR); a WDS_BAD sample's key and offset are set too. */
wds_status wds_next(wds_reader *w, wds_sample *s, char *err, size_t errlen);

#endif
