/* worker/data/decode.c - JPEG (TurboJPEG; libjpeg's API for a region) and
 * PNG (libspng) bytes to 8-bit RGB.
 *
 * Owns: the decoders' settings and the conversions to PIL's RGB (see
 * decode.h). Must not: read files, log, or know where the bytes came from.
 */
#include <spng.h>
#include <turbojpeg.h>
/* jpeglib.h needs size_t and FILE first */
#include <stdio.h>
#include <jpeglib.h>
#include <jerror.h>

#include "decode.h"
#include "util.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t PNG_SIG[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

decode_format decode_sniff(const void *data, size_t len)
{
    const uint8_t *p = data;
    if (len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) return DECODE_JPEG;
    if (len >= sizeof PNG_SIG && memcmp(p, PNG_SIG, sizeof PNG_SIG) == 0) return DECODE_PNG;
    return DECODE_UNKNOWN;
}

const char *decode_format_name(decode_format f)
{
    return f == DECODE_JPEG ? "jpeg" : f == DECODE_PNG ? "png" : "unknown";
}

void decode_image_free(decode_image *img)
{
    if (!img) return;
    free(img->rgb);
    memset(img, 0, sizeof *img);
}

/* the bomb limit, from the header's size */
static int check_pixels(const char *name, const char *fmt, uint64_t w, uint64_t h, uint64_t max,
                        char *err, size_t errlen)
{
    if (w == 0 || h == 0)
        return err_fail(err, errlen, "image file cannot be decoded (its %s header says %llux%llu "
                        "pixels): %s", fmt, (unsigned long long)w, (unsigned long long)h, name);
    if (w * h > max)
        return err_fail(err, errlen,
                        "%s: %s header says %llux%llu = %llu pixels, more than the limit of %llu "
                        "(max_pixels; a decompression bomb?)",
                        name, fmt, (unsigned long long)w, (unsigned long long)h,
                        (unsigned long long)(w * h), (unsigned long long)max);
    return 0;
}

/* Whether the bytes end as a whole file of their format does: a PNG with
 * its IEND chunk, a JPEG with its EOI marker. */
static int ends_whole(const uint8_t *p, size_t len)
{
    if (decode_sniff(p, len) == DECODE_PNG) return len >= 20 && memcmp(p + len - 8, "IEND", 4) == 0;
    return len >= 4 && p[len - 2] == 0xff && p[len - 1] == 0xd9;
}

/* A decoder's refusal in the user's words: "image file is truncated: NAME"
 * when the library ran out of data (lib_eof) or the bytes lack their format's
 * end, else "image file cannot be decoded (LIB: REASON): NAME". No source
 * location or library call: the reason is the library's own string. */
static int undecodable(char *err, size_t errlen, const char *name, const uint8_t *data,
                       size_t len, int lib_eof, const char *lib, const char *reason)
{
    if (lib_eof || !ends_whole(data, len))
        return err_fail(err, errlen, "image file is truncated: %s", name);
    return err_fail(err, errlen, "image file cannot be decoded (%s: %s): %s", lib,
                    reason ? reason : "no reason given", name);
}

/* libspng: SPNG_IO_EOF, the buffer ended before the PNG did */
static int png_fail(char *err, size_t errlen, const char *name, const uint8_t *data, size_t len,
                    int code)
{
    return undecodable(err, errlen, name, data, len, code == SPNG_IO_EOF, "libspng",
                       spng_strerror(code));
}

/* TurboJPEG: its string is libjpeg's message (JWRN_JPEG_EOF: "Premature end
 * of JPEG file" when the data ends early) */
static int tj_fail(char *err, size_t errlen, const char *name, const uint8_t *data, size_t len,
                   tjhandle h)
{
    const char *s = tjGetErrorStr2(h);
    char what[256];
    snprintf(what, sizeof what, "%s%s", tjGetErrorCode(h) == TJERR_WARNING ? "warning: " : "", s);
    return undecodable(err, errlen, name, data, len,
                       strstr(s, "Premature end of JPEG file") != NULL, "libjpeg", what);
}

/* The smallest factor <= 1 (best starts at 1/1 and only shrinks: never an
 * upscale) whose output is still >= min_w x min_h (1/1 when none is
 * smaller or no minimum is asked): for the whole image, its rounded-up
 * scaled size (TJSCALED); for a region (exact), w * num / denom itself.
 * fast: only 1/1, 1/2, 1/4 and 1/8 (decode.h says why). */
static tjscalingfactor pick_scale(int w, int h, int min_w, int min_h, int exact, int fast)
{
    tjscalingfactor best = {1, 1};
    if (min_w <= 0 && min_h <= 0) return best;
    int n = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&n);
    for (int i = 0; sf && i < n; i++) {
        if (fast && !(sf[i].num == 1 && (sf[i].denom == 1 || sf[i].denom == 2 ||
                                         sf[i].denom == 4 || sf[i].denom == 8)))
            continue;
        if (exact ? ((long)w * sf[i].num < (long)min_w * sf[i].denom ||
                     (long)h * sf[i].num < (long)min_h * sf[i].denom)
                  : (TJSCALED(w, sf[i]) < min_w || TJSCALED(h, sf[i]) < min_h))
            continue;
        if ((long)sf[i].num * best.denom < (long)best.num * sf[i].denom) best = sf[i];
    }
    return best;
}

void decode_box_in_image(const decode_image *img, double box[4])
{
    double s = (double)img->scale_num / (double)img->scale_denom;
    box[0] = box[0] * s - img->x;
    box[1] = box[1] * s - img->y;
    box[2] *= s;
    box[3] *= s;
}

/* PIL's CMYK->RGB (Convert.c cmyk2rgb) on libjpeg's output read as Adobe
 * (inverted) CMYK, PIL's "CMYK;I": in place, 4 bytes in, 3 out. */
static void cmyk_inverted_to_rgb(uint8_t *px, size_t npix)
{
    for (size_t i = 0; i < npix; i++) {
        const uint8_t *in = px + 4 * i;
        uint8_t *out = px + 3 * i;
        int nk = in[3]; /* 255 - K, K = 255 - stored */
        int c[3] = {255 - in[0], 255 - in[1], 255 - in[2]};
        for (int j = 0; j < 3; j++) {
            int t = c[j] * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            out[j] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

static int decode_jpeg(const uint8_t *data, size_t len, const char *name, const decode_opts *o,
                       uint64_t max_pixels, decode_image *out, char *err, size_t errlen)
{
    int rc = -1;
    uint8_t *buf = NULL;
    tjhandle h = tjInitDecompress();
    if (!h) return err_fail(err, errlen, "%s: tjInitDecompress: %s", name, tjGetErrorStr2(NULL));

    int w = 0, ht = 0, subsamp = 0, cs = 0;
    if (tjDecompressHeader3(h, data, (unsigned long)len, &w, &ht, &subsamp, &cs)) {
        tj_fail(err, errlen, name, data, len, h);
        goto out;
    }
    if (check_pixels(name, "jpeg", (uint64_t)w, (uint64_t)ht, max_pixels, err, errlen)) goto out;

    tjscalingfactor sf = pick_scale(w, ht, o ? o->min_width : 0, o ? o->min_height : 0, 0,
                                    o && o->fast_scales);
    int sw = TJSCALED(w, sf), sh = TJSCALED(ht, sf);
    int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    int pf = cmyk ? TJPF_CMYK : TJPF_RGB;
    size_t npix = (size_t)sw * (size_t)sh;
    buf = malloc(npix * (size_t)tjPixelSize[pf]);
    if (!buf) {
        err_printf(err, errlen, "%s: out of memory for %dx%d pixels", name, sw, sh);
        goto out;
    }
    if (tjDecompress2(h, data, (unsigned long)len, buf, sw, 0, sh, pf,
                      TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)) {
        tj_fail(err, errlen, name, data, len, h);
        goto out;
    }
    if (cmyk) {
        cmyk_inverted_to_rgb(buf, npix);
        uint8_t *shrunk = realloc(buf, npix * 3);
        if (shrunk) buf = shrunk;
    }
    *out = (decode_image){.rgb = buf, .width = sw, .height = sh, .src_width = w,
                          .src_height = ht, .scale_num = sf.num, .scale_denom = sf.denom,
                          .scaled_width = sw, .scaled_height = sh, .format = DECODE_JPEG};
    buf = NULL;
    rc = 0;
out:
    free(buf);
    tjDestroy(h);
    return rc;
}

/* libjpeg's errors and warnings end the decode through longjmp, as
 * TurboJPEG's do (TJFLAG_STOPONWARNING); the message is libjpeg's own. */
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int code;                 /* libjpeg's message code, or -1: too many scans */
    int warning;
    char msg[JMSG_LENGTH_MAX];
} jerr_mgr;

static void jerr_exit(j_common_ptr c)
{
    jerr_mgr *e = (jerr_mgr *)c->err;
    e->code = e->pub.msg_code;
    e->pub.format_message(c, e->msg);
    longjmp(e->jump, 1);
}

static void jerr_emit(j_common_ptr c, int level)
{
    jerr_mgr *e = (jerr_mgr *)c->err;
    if (level >= 0) return; /* trace messages */
    e->warning = 1;
    jerr_exit(c);
}

/* TJFLAG_LIMITSCANS: the same limit, the same words */
static void jerr_progress(j_common_ptr c)
{
    jerr_mgr *e = (jerr_mgr *)c->err;
    if (c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > 500) {
        e->code = -1;
        snprintf(e->msg, sizeof e->msg, "Progressive JPEG image has more than 500 scans");
        longjmp(e->jump, 1);
    }
}

/* The region path (decode.h, "A region"): libjpeg's API, TurboJPEG's settings. */
static int decode_jpeg_region(const uint8_t *data, size_t len, const char *name,
                              const decode_opts *o, uint64_t max_pixels, decode_image *out,
                              char *err, size_t errlen)
{
    struct jpeg_decompress_struct ci;
    struct jpeg_progress_mgr progress = {.progress_monitor = jerr_progress};
    jerr_mgr je;
    /* what setjmp's return path reads: volatile, as C11 7.13.2.1 wants */
    uint8_t *volatile buf = NULL;
    int volatile created = 0;

    memset(&je, 0, sizeof je);
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jerr_exit;
    je.pub.emit_message = jerr_emit;
    if (setjmp(je.jump)) {
        /* libjpeg's own message; the stage it failed in is not the user's */
        char what[JMSG_LENGTH_MAX + 16];
        snprintf(what, sizeof what, "%s%s", je.warning ? "warning: " : "", je.msg);
        undecodable(err, errlen, name, data, len, je.code == JWRN_JPEG_EOF, "libjpeg", what);
        if (created) jpeg_destroy_decompress(&ci);
        free(buf);
        return -1;
    }
    jpeg_create_decompress(&ci);
    created = 1;
    ci.progress = &progress;
    jpeg_mem_src(&ci, data, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    int w = (int)ci.image_width, ht = (int)ci.image_height;
    if (check_pixels(name, "jpeg", (uint64_t)w, (uint64_t)ht, max_pixels, err, errlen)) goto fail;

    /* the box, clipped to the image */
    long bx0 = o->crop_x < 0 ? 0 : o->crop_x, by0 = o->crop_y < 0 ? 0 : o->crop_y;
    long bx1 = (long)o->crop_x + o->crop_w, by1 = (long)o->crop_y + o->crop_h;
    if (bx1 > w) bx1 = w;
    if (by1 > ht) by1 = ht;
    if (bx0 >= bx1 || by0 >= by1) {
        err_printf(err, errlen, "%s: region x=%d y=%d w=%d h=%d is outside the %dx%d image", name,
                   o->crop_x, o->crop_y, o->crop_w, o->crop_h, w, ht);
        goto fail;
    }
    tjscalingfactor sf = pick_scale((int)(bx1 - bx0), (int)(by1 - by0), o->min_width,
                                    o->min_height, 1, o->fast_scales);
    int cmyk = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK;
    ci.out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGB;
    ci.dct_method = JDCT_ISLOW;
    ci.do_fancy_upsampling = TRUE;
    ci.scale_num = (unsigned)sf.num;
    ci.scale_denom = (unsigned)sf.denom;
    jpeg_start_decompress(&ci);
    int sw = (int)ci.output_width, sh = (int)ci.output_height;

    /* the box in scaled pixels, outward; one column more on each side (the
     * outermost decoded column of a cropped side is inexact: decode.h) */
    long x0 = bx0 * sf.num / sf.denom, y0 = by0 * sf.num / sf.denom;
    long x1 = (bx1 * sf.num + sf.denom - 1) / sf.denom, y1 = (by1 * sf.num + sf.denom - 1) / sf.denom;
    x0 = x0 > 0 ? x0 - 1 : 0;
    x1 = x1 < sw ? x1 + 1 : sw;
    if (y1 > sh) y1 = sh;
    JDIMENSION xoff = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
    if (xoff != 0 || cw != (JDIMENSION)sw) {
        jpeg_crop_scanline(&ci, &xoff, &cw);
    }
    int rw = (int)cw, rh = (int)(y1 - y0), px = cmyk ? 4 : 3;
    buf = malloc((size_t)rw * (size_t)rh * (size_t)px);
    if (!buf) {
        err_printf(err, errlen, "%s: out of memory for a %dx%d region", name, rw, rh);
        goto fail;
    }
    if (y0 > 0) {
        JDIMENSION skipped = jpeg_skip_scanlines(&ci, (JDIMENSION)y0);
        if (skipped != (JDIMENSION)y0) {
            err_printf(err, errlen, "%s: jpeg_skip_scanlines skipped %u of %ld rows", name, skipped,
                       y0);
            goto fail;
        }
    }
    for (int r = 0; r < rh;) {
        JSAMPROW rows[16];
        int n = rh - r < 16 ? rh - r : 16;
        for (int i = 0; i < n; i++) rows[i] = buf + (size_t)(r + i) * (size_t)rw * (size_t)px;
        JDIMENSION got = jpeg_read_scanlines(&ci, rows, (JDIMENSION)n);
        if (got == 0) {
            err_printf(err, errlen, "%s: jpeg_read_scanlines returned no row at row %ld", name,
                       y0 + r);
            goto fail;
        }
        r += (int)got;
    }
    /* the rows below are never read: no jpeg_finish_decompress */
    jpeg_abort_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    if (cmyk) {
        cmyk_inverted_to_rgb(buf, (size_t)rw * (size_t)rh);
        uint8_t *shrunk = realloc(buf, (size_t)rw * (size_t)rh * 3);
        if (shrunk) buf = shrunk;
    }
    *out = (decode_image){.rgb = buf, .width = rw, .height = rh, .src_width = w,
                          .src_height = ht, .scale_num = sf.num, .scale_denom = sf.denom,
                          .scaled_width = sw, .scaled_height = sh, .x = (int)xoff, .y = (int)y0,
                          .format = DECODE_JPEG};
    return 0;
fail:
    jpeg_destroy_decompress(&ci);
    free(buf);
    return -1;
}

static int decode_png(const uint8_t *data, size_t len, const char *name, uint64_t max_pixels,
                      decode_image *out, char *err, size_t errlen)
{
    int rc = -1;
    uint8_t *buf = NULL;
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) return err_fail(err, errlen, "%s: spng_ctx_new: out of memory", name);

    /* no chunk can be longer than the file; keeps a lying length from
     * making libspng reserve memory for it */
    int code;
    if ((code = spng_set_chunk_limits(ctx, len, len)) ||
        (code = spng_set_png_buffer(ctx, data, len))) {
        png_fail(err, errlen, name, data, len, code);
        goto out;
    }
    struct spng_ihdr ihdr;
    if ((code = spng_get_ihdr(ctx, &ihdr))) {
        png_fail(err, errlen, name, data, len, code);
        goto out;
    }
    if (check_pixels(name, "png", ihdr.width, ihdr.height, max_pixels, err, errlen)) goto out;

    size_t size = 0;
    if ((code = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &size))) {
        png_fail(err, errlen, name, data, len, code);
        goto out;
    }
    buf = malloc(size);
    if (!buf) {
        err_printf(err, errlen, "%s: out of memory for %ux%u pixels", name, ihdr.width,
                   ihdr.height);
        goto out;
    }
    /* flags 0: tRNS and gAMA ignored, as PIL's convert("RGB") does */
    if ((code = spng_decode_image(ctx, buf, size, SPNG_FMT_RGB8, 0))) {
        png_fail(err, errlen, name, data, len, code);
        goto out;
    }
    *out = (decode_image){.rgb = buf, .width = (int)ihdr.width, .height = (int)ihdr.height,
                          .src_width = (int)ihdr.width, .src_height = (int)ihdr.height,
                          .scale_num = 1, .scale_denom = 1, .scaled_width = (int)ihdr.width,
                          .scaled_height = (int)ihdr.height, .format = DECODE_PNG};
    buf = NULL;
    rc = 0;
out:
    free(buf);
    spng_ctx_free(ctx);
    return rc;
}

/* "NAME: not a JPEG or PNG (...)" */
static int not_an_image(const void *data, size_t len, const char *name, char *err, size_t errlen)
{
    const uint8_t *p = data;
    char head[3 * 8 + 1] = "";
    for (size_t i = 0, n = 0; i < len && i < 8; i++)
        n += (size_t)snprintf(head + n, sizeof head - n, "%s%02x", i ? " " : "", p[i]);
    if (len == 0) return err_fail(err, errlen, "%s: empty (0 bytes): not a JPEG or PNG", name);
    return err_fail(err, errlen, "%s: not a JPEG or PNG (%zu bytes starting %s)", name, len, head);
}

int decode_probe(const void *data, size_t len, const char *name, decode_format *fmt, int *width,
                 int *height, char *err, size_t errlen)
{
    if (!name) name = "(image)";
    *fmt = decode_sniff(data, len);
    *width = *height = 0;
    if (*fmt == DECODE_JPEG) {
        tjhandle h = tjInitDecompress();
        if (!h)
            return err_fail(err, errlen, "%s: tjInitDecompress: %s", name, tjGetErrorStr2(NULL));
        int subsamp = 0, cs = 0;
        int rc = tjDecompressHeader3(h, data, (unsigned long)len, width, height, &subsamp, &cs);
        if (rc) tj_fail(err, errlen, name, data, len, h);
        tjDestroy(h);
        if (rc) return -1;
        /* a header cut before its SOF reads as "tables only": 0 x 0 */
        return check_pixels(name, "jpeg", (uint64_t)*width, (uint64_t)*height, UINT64_MAX, err,
                            errlen);
    }
    if (*fmt == DECODE_PNG) {
        spng_ctx *ctx = spng_ctx_new(0);
        if (!ctx) return err_fail(err, errlen, "%s: spng_ctx_new: out of memory", name);
        struct spng_ihdr ihdr;
        int code = spng_set_png_buffer(ctx, data, len);
        if (!code) code = spng_get_ihdr(ctx, &ihdr);
        spng_ctx_free(ctx);
        if (code) return png_fail(err, errlen, name, data, len, code);
        *width = (int)ihdr.width, *height = (int)ihdr.height;
        return 0;
    }
    return not_an_image(data, len, name, err, errlen);
}

int decode_image_rgb(const void *data, size_t len, const char *name, const decode_opts *opts,
                     decode_image *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!name) name = "(image)";
    uint64_t max = opts && opts->max_pixels ? opts->max_pixels : DECODE_MAX_PIXELS_DEFAULT;
    switch (decode_sniff(data, len)) {
    case DECODE_JPEG:
        if (opts && opts->crop_w > 0 && opts->crop_h > 0)
            return decode_jpeg_region(data, len, name, opts, max, out, err, errlen);
        return decode_jpeg(data, len, name, opts, max, out, err, errlen);
    case DECODE_PNG: return decode_png(data, len, name, max, out, err, errlen);
    default: break;
    }
    return not_an_image(data, len, name, err, errlen);
}
