/* worker/data/encode.c - raw pixels to JPEG (TurboJPEG) or PNG (libspng).
 *
 * Owns: the encoders' fixed settings (see encode.h). Must not: read or
 * write files, log, or know where the pixels came from.
 */
#include <spng.h>
#include <turbojpeg.h>

#include "check.h"
#include "encode.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

const char *encode_ext(encode_format f) { return f == ENCODE_PNG ? "png" : "jpg"; }

static int encode_jpeg(const uint8_t *px, int w, int h, int channels, int quality,
                       const char *name, unsigned char **out, size_t *out_len, char *err,
                       size_t errlen)
{
    char why[512];
    int subsamp = channels == 1 ? TJSAMP_GRAY : TJSAMP_444;
    int pf = channels == 1 ? TJPF_GRAY : TJPF_RGB;
    unsigned long cap = tjBufSize(w, h, subsamp);
    if (cap == (unsigned long)-1)
        return err_fail(err, errlen, "%s: tjBufSize: %dx%d too large", name, w, h);
    /* our own buffer, never reallocated by the library: freed with free() */
    unsigned char *buf = malloc(cap);
    if (!buf) return err_fail(err, errlen, "%s: out of memory for a %lu-byte JPEG", name, cap);
    tjhandle tj = tjInitCompress();
    if (!tj) {
        free(buf);
        return err_fail(err, errlen, "%s: tjInitCompress: %s", name, tjGetErrorStr2(NULL));
    }
    unsigned long len = cap;
    int rc = TJ_CHECK(tjCompress2(tj, px, w, 0, h, pf, &buf, &len, subsamp, quality,
                                  TJFLAG_ACCURATEDCT | TJFLAG_NOREALLOC),
                      tj, why, sizeof why);
    tjDestroy(tj);
    if (rc) {
        free(buf);
        return err_fail(err, errlen, "%s: %s", name, why);
    }
    *out = buf;
    *out_len = len;
    return 0;
}

static int encode_png(const uint8_t *px, int w, int h, int channels, const char *name,
                      unsigned char **out, size_t *out_len, char *err, size_t errlen)
{
    char why[512];
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    if (!ctx) return err_fail(err, errlen, "%s: spng_ctx_new: out of memory", name);
    struct spng_ihdr ihdr = {.width = (uint32_t)w, .height = (uint32_t)h, .bit_depth = 8,
                             .color_type = channels == 1 ? SPNG_COLOR_TYPE_GRAYSCALE
                                                         : SPNG_COLOR_TYPE_TRUECOLOR};
    size_t len = (size_t)w * (size_t)h * (size_t)channels;
    int e = 0;
    void *png = NULL;
    if (SPNG_CHECK(spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1), why, sizeof why) ||
        SPNG_CHECK(spng_set_ihdr(ctx, &ihdr), why, sizeof why) ||
        SPNG_CHECK(spng_encode_image(ctx, px, len, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), why,
                   sizeof why)) {
        spng_ctx_free(ctx);
        return err_fail(err, errlen, "%s: %s", name, why);
    }
    png = spng_get_png_buffer(ctx, out_len, &e); /* the context's malloc: ours to free() */
    if (!png) {
        SPNG_CHECK(e ? e : SPNG_EINTERNAL, why, sizeof why);
        spng_ctx_free(ctx);
        return err_fail(err, errlen, "%s: %s", name, why);
    }
    spng_ctx_free(ctx);
    *out = png;
    return 0;
}

int encode_image(encode_format f, const uint8_t *pixels, int width, int height, int channels,
                 int quality, const char *name, unsigned char **out, size_t *out_len, char *err,
                 size_t errlen)
{
    *out = NULL;
    *out_len = 0;
    if (width <= 0 || height <= 0 || (channels != 1 && channels != 3))
        return err_fail(err, errlen, "%s: cannot encode %dx%d pixels of %d channels", name, width,
                        height, channels);
    if (f == ENCODE_PNG)
        return encode_png(pixels, width, height, channels, name, out, out_len, err, errlen);
    if (quality < 1 || quality > 100)
        return err_fail(err, errlen, "%s: JPEG quality %d is not in [1, 100]", name, quality);
    return encode_jpeg(pixels, width, height, channels, quality, name, out, out_len, err, errlen);
}
