/* tests/test_fuzz_data.c - deterministic mutation fuzzing of what a rank
 * reads from a shard: worker/data/tar.c, wds.c and decode.c together
 * (issue 25: no input ever crashes the worker).
 *
 * Owns: the seeds, made here: JPEGs from TurboJPEG (baseline 4:2:0,
 * progressive, grayscale, restart markers, YCCK, arithmetic coding), PNGs
 * from libspng's encoder (gray 1/8/16-bit, gray+alpha, RGB 8/16-bit, RGBA,
 * palette 4/8-bit with tRNS, Adam7 interlaced), and tar shards of them as
 * webdataset samples (.cls and .json labels) whose names go through ustar,
 * ustar's prefix/name split, GNU long names and pax headers (some with a
 * pax size overriding a wrong ustar size), with a pax global header,
 * directories and links between them; the seeded mutators (rng.h: every run
 * is the same), aimed at the tar structure (bit flips, interesting bytes,
 * cuts at every kind of boundary, blocks duplicated or deleted, header
 * fields with the checksum made right again, pax records and long names),
 * at the images inside a shard (JPEG marker segments and their lengths, SOF
 * fields and huge dimensions, tables, scans; PNG chunk lengths, IHDR, data
 * with the CRC made right again, chunks dropped, doubled or renamed) and at
 * the labels; and the invariants every outcome must keep (check_*).
 * tests/run.sh runs it under ASan + UBSan too, where any crash, read out of
 * bounds, leak or undefined behaviour fails it. Each test prints the count
 * of each outcome.
 * Must not: read files, the network or the clock: everything here is a
 * pure function of the seeds.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "decode.h"
#include "rng.h"
#include "tar.h"
#include "wds.h"

/* the bound on every member in these runs, and the decoders' pixel limit:
 * every seed image is well inside both */
#define MAX_MEMBER (1u << 16)
#define MAX_PIXELS (1u << 14)

/* the seed of every mutation (-DFUZZ_SEED=N: another hunt, by hand) */
#ifndef FUZZ_SEED
#define FUZZ_SEED 25
#endif

/* ---- bytes ---- */

typedef struct {
    unsigned char *p;
    size_t n, cap;
} bytes;

static void b_reserve(bytes *b, size_t more)
{
    if (b->n + more <= b->cap)
        return;
    b->cap = (b->n + more) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    cr_assert_not_null(b->p);
}

static void b_put(bytes *b, const void *p, size_t n)
{
    b_reserve(b, n);
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void b_zero(bytes *b, size_t n)
{
    b_reserve(b, n);
    memset(b->p + b->n, 0, n);
    b->n += n;
}

/* n bytes at p, in a buffer of exactly n bytes, so that ASan sees a read
 * one byte past them */
static unsigned char *exact_copy(const void *p, size_t n)
{
    unsigned char *e = malloc(n ? n : 1);
    cr_assert_not_null(e);
    if (n)
        memcpy(e, p, n);
    return e;
}

/* ---- the seed images ---- */

typedef struct {
    const char *what;
    const char *ext;       /* as the shard spells it */
    unsigned char *p;
    size_t n;
    int w, h;
    unsigned char *rgb;    /* PNG: what decoding must give; JPEG: the source */
} seed_img;

#define MAX_IMGS 20
static seed_img imgs[MAX_IMGS];
static int n_imgs;

/* a smooth picture with some texture: channel c of pixel (x, y) */
static unsigned char px(int x, int y, int w, int h, int c)
{
    unsigned v = (unsigned)(x * 255 / (w > 1 ? w - 1 : 1) * (c == 0) +
                            y * 255 / (h > 1 ? h - 1 : 1) * (c == 1) +
                            (x + y) * 255 / (w + h) * (c >= 2) + (x * 7 + y * 13) % 9 * 2);
    return (unsigned char)(v > 255 ? 255 : v);
}

static void add_img(const char *what, const char *ext, unsigned char *p, size_t n, int w, int h,
                    unsigned char *rgb)
{
    cr_assert_lt(n_imgs, MAX_IMGS);
    imgs[n_imgs++] = (seed_img){what, ext, p, n, w, h, rgb};
}

/* A JPEG of the picture: pf and subsamp as TurboJPEG takes them; env
 * "TJ_RESTART=..." or "TJ_ARITHMETIC=1" (TurboJPEG 2's own switches for
 * what its flags cannot ask) set for this one compression. */
static void add_jpeg(const char *what, const char *ext, int w, int h, int pf, int subsamp,
                     int flags, const char *env)
{
    int ps = tjPixelSize[pf];
    unsigned char *src = malloc((size_t)w * h * ps);
    cr_assert_not_null(src);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < ps; c++)
                src[((size_t)y * w + x) * ps + c] = px(x, y, w, h, c);
    char var[32] = "";
    if (env) {
        const char *eq = strchr(env, '=');
        snprintf(var, sizeof var, "%.*s", (int)(eq - env), env);
        cr_assert_eq(setenv(var, eq + 1, 1), 0);
    }
    tjhandle t = tjInitCompress();
    cr_assert_not_null(t);
    unsigned char *jpg = NULL;
    unsigned long n = 0;
    cr_assert_eq(tjCompress2(t, src, w, 0, h, pf, &jpg, &n, subsamp, 85, flags), 0, "%s: %s",
                 what, tjGetErrorStr2(t));
    tjDestroy(t);
    if (env)
        unsetenv(var);
    add_img(what, ext, exact_copy(jpg, n), n, w, h, src);
    tjFree(jpg);
}

/* A PNG from libspng's encoder: the samples are val(x, y, channel), of the
 * ihdr's depth; rgb is what decode_image_rgb must give for them. */
static void add_png(const char *what, const char *ext, int w, int h, int ctype, int depth,
                    int interlace)
{
    static const int chans[7] = {1, 0, 3, 1, 2, 0, 4};
    int ch = chans[ctype];
    size_t row = ((size_t)w * ch * depth + 7) / 8;
    unsigned char *raw = calloc(row * h, 1), *rgb = malloc((size_t)w * h * 3);
    cr_assert(raw && rgb);
    unsigned maxv = depth == 16 ? 65535u : (1u << depth) - 1;
    struct spng_plte plte = {0};
    struct spng_trns trns = {0};
    if (ctype == SPNG_COLOR_TYPE_INDEXED) {
        plte.n_entries = 1u << depth;
        for (unsigned i = 0; i < plte.n_entries; i++)
            plte.entries[i] = (struct spng_plte_entry){(uint8_t)(i * 37), (uint8_t)(255 - i * 11),
                                                       (uint8_t)(i * i), 255};
        trns.n_type3_entries = plte.n_entries / 2;
        for (unsigned i = 0; i < trns.n_type3_entries; i++)
            trns.type3_alpha[i] = (uint8_t)(i * 16);
    }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            unsigned v[4];
            for (int c = 0; c < ch; c++) {
                v[c] = ((unsigned)px(x, y, w, h, c) * 257u + (unsigned)(x * 31 + y)) % (maxv + 1);
                size_t bit = ((size_t)x * ch + c) * depth;
                unsigned char *q = raw + y * row;
                if (depth == 16) {
                    q[bit / 8] = (unsigned char)(v[c] >> 8);
                    q[bit / 8 + 1] = (unsigned char)v[c];
                } else {
                    q[bit / 8] |= (unsigned char)(v[c] << (8 - depth - bit % 8));
                }
            }
            unsigned char *o = rgb + ((size_t)y * w + x) * 3;
            /* to 8 bits as PIL and libspng do: the high byte of 16, a scale up of 1/2/4 */
            unsigned s8[4];
            for (int c = 0; c < ch; c++)
                s8[c] = depth == 16 ? v[c] >> 8 : depth == 8 ? v[c] : v[c] * 255 / maxv;
            if (ctype == SPNG_COLOR_TYPE_INDEXED) {
                o[0] = plte.entries[v[0]].red;
                o[1] = plte.entries[v[0]].green;
                o[2] = plte.entries[v[0]].blue;
            } else if (ch <= 2) {
                o[0] = o[1] = o[2] = (unsigned char)s8[0];
            } else {
                for (int c = 0; c < 3; c++)
                    o[c] = (unsigned char)s8[c];
            }
        }
    spng_ctx *e = spng_ctx_new(SPNG_CTX_ENCODER);
    cr_assert_not_null(e);
    struct spng_ihdr ihdr = {(uint32_t)w, (uint32_t)h, (uint8_t)depth, (uint8_t)ctype, 0, 0,
                             (uint8_t)interlace};
    cr_assert_eq(spng_set_option(e, SPNG_ENCODE_TO_BUFFER, 1), 0);
    cr_assert_eq(spng_set_ihdr(e, &ihdr), 0, "%s", what);
    if (ctype == SPNG_COLOR_TYPE_INDEXED) {
        cr_assert_eq(spng_set_plte(e, &plte), 0, "%s", what);
        cr_assert_eq(spng_set_trns(e, &trns), 0, "%s", what);
    }
    int rc = spng_encode_image(e, raw, row * h, SPNG_FMT_RAW, SPNG_ENCODE_FINALIZE);
    cr_assert_eq(rc, 0, "%s: %s", what, spng_strerror(rc));
    size_t n = 0;
    int err = 0;
    unsigned char *png = spng_get_png_buffer(e, &n, &err);
    cr_assert(png && !err, "%s: %s", what, spng_strerror(err));
    spng_ctx_free(e);
    free(raw);
    add_img(what, ext, exact_copy(png, n), n, w, h, rgb);
    free(png);
}

static void make_images(void)
{
    if (n_imgs)
        return;
    add_jpeg("jpeg baseline 4:2:0", "jpg", 37, 23, TJPF_RGB, TJSAMP_420, 0, NULL);
    add_jpeg("jpeg progressive 4:4:4", "jpeg", 40, 30, TJPF_RGB, TJSAMP_444, TJFLAG_PROGRESSIVE,
             NULL);
    add_jpeg("jpeg grayscale", "JPG", 33, 17, TJPF_GRAY, TJSAMP_GRAY, 0, NULL);
    add_jpeg("jpeg restart markers 4:2:2", "jpg", 48, 32, TJPF_RGB, TJSAMP_422, 0,
             "TJ_RESTART=1B");
    add_jpeg("jpeg progressive 4:2:0 restart", "jpg", 35, 27, TJPF_RGB, TJSAMP_420,
             TJFLAG_PROGRESSIVE, "TJ_RESTART=1");
    add_jpeg("jpeg ycck", "jpg", 24, 16, TJPF_CMYK, TJSAMP_444, 0, NULL);
    add_jpeg("jpeg arithmetic", "Jpeg", 20, 20, TJPF_RGB, TJSAMP_420, 0, "TJ_ARITHMETIC=1");
    add_png("png gray 1-bit", "png", 19, 7, SPNG_COLOR_TYPE_GRAYSCALE, 1, 0);
    add_png("png gray 8-bit", "png", 17, 9, SPNG_COLOR_TYPE_GRAYSCALE, 8, 0);
    add_png("png gray 16-bit", "PNG", 9, 5, SPNG_COLOR_TYPE_GRAYSCALE, 16, 0);
    add_png("png gray+alpha 16-bit", "png", 8, 6, SPNG_COLOR_TYPE_GRAYSCALE_ALPHA, 16, 0);
    add_png("png rgb 8-bit", "png", 31, 19, SPNG_COLOR_TYPE_TRUECOLOR, 8, 0);
    add_png("png rgb 16-bit", "png", 9, 9, SPNG_COLOR_TYPE_TRUECOLOR, 16, 0);
    add_png("png rgba 8-bit", "Png", 16, 16, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 8, 0);
    add_png("png palette 8-bit tRNS", "png", 12, 12, SPNG_COLOR_TYPE_INDEXED, 8, 0);
    add_png("png palette 4-bit tRNS", "png", 13, 5, SPNG_COLOR_TYPE_INDEXED, 4, 0);
    add_png("png rgb 8-bit interlaced", "png", 21, 13, SPNG_COLOR_TYPE_TRUECOLOR, 8, 1);
}

static void free_images(void)
{
    for (int i = 0; i < n_imgs; i++) {
        free(imgs[i].p);
        free(imgs[i].rgb);
    }
    n_imgs = 0;
}

/* each test well inside it, under ASan too (the counts: the ITER_* below) */
TestSuite(fuzz_data, .timeout = 240, .fini = free_images);

/* the seed image whose bytes these are, or -1 (mutated ones are decoded,
 * untouched ones were checked once by the seed test) */
static int seed_of(const unsigned char *p, size_t n)
{
    for (int i = 0; i < n_imgs; i++)
        if (imgs[i].n == n && !memcmp(imgs[i].p, p, n))
            return i;
    return -1;
}

/* ---- the shards ---- */

enum { ST_USTAR, ST_PREFIX, ST_GNU, ST_PAX, ST_PAX_SIZE, N_STYLES };

/* where the headers and data are, to aim mutations at */
typedef struct {
    size_t hdr;   /* the header block */
    char type;
    size_t size;  /* the data's */
} region;

#define MAX_REGIONS 256
typedef struct {
    bytes b;
    region r[MAX_REGIONS];
    int nr;
    size_t end; /* where the end-of-archive blocks start */
} shard;

static void fix_checksum(unsigned char *h)
{
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

static void put_hdr(shard *s, const char *name, const char *prefix, char type, size_t size,
                    int gnu)
{
    unsigned char h[512] = {0};
    size_t nl = strlen(name);
    memcpy(h, name, nl < 100 ? nl : 100);
    if (prefix)
        memcpy(h + 345, prefix, strlen(prefix));
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    memcpy(h + 136, "00000000000", 12);
    h[156] = (unsigned char)type;
    if (type == '2')
        memcpy(h + 157, "elsewhere.jpg", 13);
    if (gnu) {
        memcpy(h + 257, "ustar  ", 8);
    } else {
        memcpy(h + 257, "ustar", 6);
        memcpy(h + 263, "00", 2);
    }
    fix_checksum(h);
    cr_assert_lt(s->nr, MAX_REGIONS);
    s->r[s->nr++] = (region){s->b.n, type, size};
    b_put(&s->b, h, 512);
}

static void put_data(shard *s, const void *p, size_t n)
{
    b_put(&s->b, p, n);
    b_zero(&s->b, (512 - n % 512) % 512);
}

/* "LEN key=value\n", LEN counting itself */
static void pax_rec(bytes *b, const char *key, const char *val)
{
    size_t body = strlen(key) + strlen(val) + 3, total = body + 1;
    while ((size_t)snprintf(NULL, 0, "%zu", total) + body != total)
        total++;
    char *r = malloc(total + 1);
    cr_assert_not_null(r);
    snprintf(r, total + 1, "%zu %s=%s\n", total, key, val);
    b_put(b, r, total);
    free(r);
}

static void add_member(shard *s, const char *name, const void *data, size_t n, int style)
{
    size_t nl = strlen(name);
    if (style == ST_PREFIX && nl > 100) {
        const char *cut = NULL;
        for (const char *q = name; (q = strchr(q, '/')); q++)
            if ((size_t)(q - name) <= 155 && strlen(q + 1) <= 100)
                cut = q;
        cr_assert_not_null(cut, "%s: no prefix/name split", name);
        char pre[156];
        snprintf(pre, sizeof pre, "%.*s", (int)(cut - name), name);
        put_hdr(s, cut + 1, pre, '0', n, 0);
    } else if (style == ST_GNU && nl > 100) {
        put_hdr(s, "././@LongLink", NULL, 'L', nl + 1, 1);
        put_data(s, name, nl + 1);
        put_hdr(s, name, NULL, '0', n, 1);
    } else if ((style == ST_PAX && nl > 100) || style == ST_PAX_SIZE) {
        bytes rec = {0};
        char sz[32];
        snprintf(sz, sizeof sz, "%zu", n);
        pax_rec(&rec, "path", name);
        if (style == ST_PAX_SIZE) {
            pax_rec(&rec, "mtime", "1700000000.25");
            pax_rec(&rec, "size", sz);
        }
        put_hdr(s, "././@PaxHeader", NULL, 'x', rec.n, 0);
        put_data(s, rec.p, rec.n);
        free(rec.p);
        /* with a pax size, the ustar size field is not read: say 0 there */
        put_hdr(s, name, NULL, '0', style == ST_PAX_SIZE ? 0 : n, 0);
    } else {
        cr_assert_leq(nl, 100, "%s", name);
        put_hdr(s, name, NULL, '0', n, 0);
    }
    put_data(s, data, n);
}

/* The key of sample i in a name of style st: long ones for the styles that
 * exist to carry them. */
static void sample_key(char *key, size_t cap, int k, int i, int st)
{
    static const char pad[] = "a-rather-long-directory-name-of-the-dataset-0123456789";
    if (st == ST_GNU || st == ST_PAX)
        snprintf(key, cap, "train/%s/%s/s%d_%04d", pad, pad, k, i);
    else if (st == ST_PREFIX)
        snprintf(key, cap, "train/%s/%s/s%d_%04d", pad, pad + 20, k, i);
    else
        snprintf(key, cap, "s%d/img_%04d", k, i);
}

/* Seed shard k: one sample per seed image (image with replacement
 * override, when given, in sample `which`), labels alternating .cls and
 * .json, and around them a pax global header, a directory, a symbolic
 * link, an extra member, a sample without a label. */
static void build_shard(shard *s, int k, int which, const unsigned char *over, size_t over_n)
{
    memset(s, 0, sizeof *s);
    if (k % 2) {
        bytes g = {0};
        pax_rec(&g, "comment", "a global header, read and ignored");
        put_hdr(s, "pax_global_header", NULL, 'g', g.n, 0);
        put_data(s, g.p, g.n);
        free(g.p);
    }
    for (int i = 0; i < n_imgs; i++) {
        int j = (i + k) % n_imgs, st = (i + k) % N_STYLES;
        char key[200], name[240], lab[64];
        sample_key(key, sizeof key, k, i, st);
        if (i == 3)
            put_hdr(s, "s/dir/", NULL, '5', 0, 0);
        if (i == 5)
            put_hdr(s, "s/link.jpg", NULL, '2', 0, 0);
        snprintf(name, sizeof name, "%s.%s", key, imgs[j].ext);
        if (i == which)
            add_member(s, name, over, over_n, st);
        else
            add_member(s, name, imgs[j].p, imgs[j].n, st);
        if (i == 7) /* no label: a bad sample */
            continue;
        if (i % 2) {
            snprintf(name, sizeof name, "%s.cls", key);
            snprintf(lab, sizeof lab, " %d\n", i);
        } else {
            snprintf(name, sizeof name, "%s.json", key);
            snprintf(lab, sizeof lab, "{\"label\": %d, \"name\": \"x\\u00e9\"}", i);
        }
        add_member(s, name, lab, strlen(lab), (st + 1) % N_STYLES);
        if (i % 4 == 1) {
            snprintf(name, sizeof name, "%s.txt", key);
            add_member(s, name, "a caption", 9, st);
        }
    }
    s->end = s->b.n;
    b_zero(&s->b, 1024);
}

/* ---- the invariants ---- */

typedef struct {
    long shards, tar_end, tar_err, read_err, members;
    long why[6]; /* the tar refusals by kind: TAR_WHY */
    long samples, bad, wds_end, wds_err;
    long dec_ok, dec_scaled, dec_bomb, dec_jpeg, dec_png, dec_other, dec_skipped;
    char tar_msg[1024]; /* the last shard's end, when it failed */
} counts;

/* the kinds of refusal the tar reader's messages name (the last: any other) */
static const char *const TAR_WHY[6] = {"checksum", "truncated", "more than the limit", "pax",
                                       "read error", "other"};

static void print_counts(const char *test, long n, const counts *c)
{
    fprintf(stderr,
            "%s: %ld mutated shards: tar %ld read to the end, %ld refused (%ld of them a failing "
            "stream), %ld members; wds %ld "
            "samples, %ld bad samples skipped, %ld ended, %ld refused; decode %ld whole (%ld of "
            "them DCT-scaled), refused %ld over max_pixels, %ld by libjpeg, %ld by libspng, %ld "
            "neither JPEG nor PNG (%ld untouched seed images not decoded)\n",
            test, n, c->tar_end, c->tar_err, c->read_err, c->members, c->samples, c->bad, c->wds_end,
            c->wds_err, c->dec_ok, c->dec_scaled, c->dec_bomb, c->dec_jpeg, c->dec_png,
            c->dec_other, c->dec_skipped);
    if (c->tar_err) {
        fprintf(stderr, "  tar refusals:");
        for (int i = 0; i < 6; i++)
            fprintf(stderr, " %ld %s%s", c->why[i], TAR_WHY[i], i < 5 ? "," : "\n");
    }
}

/* Decodes p[0..n) as `name` with o: a whole image as wide and high as
 * claimed (every byte touched) and within the options, or -1 naming it. */
static void check_decode(const unsigned char *p, size_t n, const char *name, const decode_opts *o,
                         counts *c)
{
    unsigned char *e = exact_copy(p, n);
    decode_image img;
    char err[1024];
    err[0] = '\0';
    int rc = decode_image_rgb(e, n, name, o, &img, err, sizeof err);
    cr_assert(rc == 0 || rc == -1, "%s: decode returned %d", name, rc);
    if (rc == 0) {
        cr_assert_not_null(img.rgb, "%s", name);
        cr_assert(img.width > 0 && img.height > 0, "%s: %dx%d", name, img.width, img.height);
        cr_assert_eq(img.format, decode_sniff(e, n), "%s", name);
        cr_assert_neq(img.format, DECODE_UNKNOWN, "%s", name);
        cr_assert_leq((uint64_t)img.src_width * (uint64_t)img.src_height, o->max_pixels,
                      "%s: %dx%d decoded past max_pixels", name, img.src_width, img.src_height);
        cr_assert(img.scale_num >= 1 && img.scale_num <= img.scale_denom, "%s: scale %d/%d", name,
                  img.scale_num, img.scale_denom);
        cr_assert_eq(img.width, (img.src_width * img.scale_num + img.scale_denom - 1) /
                                    img.scale_denom, "%s", name);
        cr_assert_eq(img.height, (img.src_height * img.scale_num + img.scale_denom - 1) /
                                     img.scale_denom, "%s", name);
        if (img.scale_num != img.scale_denom) {
            cr_assert_eq(img.format, DECODE_JPEG, "%s: a scaled PNG", name);
            cr_assert(img.width >= o->min_width && img.height >= o->min_height,
                      "%s: scaled to %dx%d, below the minimum %dx%d", name, img.width,
                      img.height, o->min_width, o->min_height);
            c->dec_scaled++;
        }
        unsigned sum = 0;
        for (size_t i = 0; i < (size_t)img.width * img.height * 3; i++)
            sum += img.rgb[i];
        (void)sum;
        decode_image_free(&img);
        cr_assert_null(img.rgb);
        c->dec_ok++;
    } else {
        cr_assert_null(img.rgb, "%s: a failed decode left pixels", name);
        cr_assert(img.width == 0 && img.height == 0, "%s", name);
        /* "NAME: why" (a refusal before decoding) or "image file ...: NAME" */
        size_t nl = strlen(name), el = strlen(err);
        int leads = !strncmp(err, name, nl) && !strncmp(err + nl, ": ", 2) && err[nl + 2];
        int ends = el > nl + 2 && !strcmp(err + el - nl, name) &&
                   !strncmp(err + el - nl - 2, ": ", 2) && !strncmp(err, "image file ", 11);
        cr_assert(leads || ends, "%s: the message does not name it: '%s'", name, err);
        if (strstr(err, "max_pixels"))
            c->dec_bomb++;
        else if (!strncmp(err, "image file ", 11) && decode_sniff(e, n) == DECODE_JPEG)
            c->dec_jpeg++; /* libjpeg refused it */
        else if (!strncmp(err, "image file ", 11) && decode_sniff(e, n) == DECODE_PNG)
            c->dec_png++;  /* libspng refused it */
        else
            c->dec_other++;
    }
    free(e);
}

/* the decodes of one image: full size, and DCT-scaled to a drawn minimum */
static void decode_both(const unsigned char *p, size_t n, const char *name, rng_state *g,
                        counts *c)
{
    if (seed_of(p, n) >= 0) {
        c->dec_skipped++;
        return;
    }
    decode_opts full = {.max_pixels = MAX_PIXELS};
    decode_opts scaled = {.max_pixels = MAX_PIXELS, .min_width = 1 + (int)rng_below(g, 40),
                          .min_height = (int)rng_below(g, 30)};
    check_decode(p, n, name, &full, c);
    check_decode(p, n, name, &scaled, c);
}

static int is_image_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return 0;
    char e[8] = "";
    for (size_t i = 0; dot[1 + i] && i < sizeof e - 1; i++)
        e[i] = (char)tolower((unsigned char)dot[1 + i]);
    return !strcmp(e, "jpg") || !strcmp(e, "jpeg") || !strcmp(e, "png");
}

/* a stream that hands out 1 to 1024 bytes per read, drawn, and fails (-1)
 * once a read would reach byte fail_at */
typedef struct {
    tar_mem m;
    rng_state g;
    size_t fail_at;
    int failed;
} chunky;

static ssize_t chunky_read(void *ctx, void *buf, size_t n)
{
    chunky *c = ctx;
    size_t k = 1 + (size_t)rng_below(&c->g, rng_below(&c->g, 2) ? 1024 : 16);
    if (k > n)
        k = n;
    if (c->m.pos + k > c->fail_at) {
        c->failed = 1;
        return -1;
    }
    return tar_mem_read(&c->m, buf, k);
}

static int starts_with(const char *s, const char *pre) { return !strncmp(s, pre, strlen(pre)); }

/* Reads the shard p[0..n) (an exact buffer) member by member through a
 * stream of drawn read sizes, decoding every image member; then sample by
 * sample through wds (whole reads), decoding every sample's image. Both
 * must keep their invariants and end the same way, with the same message.
 * hostile: some shards get a smaller member limit, and some a stream that
 * fails part way (a read error, named as one, with its offset). */
static void check_shard(const unsigned char *p, size_t n, int iter, rng_state *g, counts *c,
                        int hostile)
{
    static const uint64_t limits[] = {0, 1, 511, 512, 700, 4096};
    uint64_t max_member = hostile && rng_below(g, 8) == 0 ? limits[rng_below(g, 6)] : MAX_MEMBER;
    char shard_name[64], pre[80];
    snprintf(shard_name, sizeof shard_name, "fuzz-%05d.tar", iter);
    snprintf(pre, sizeof pre, "shard %s: ", shard_name);
    c->shards++;

    /* the tar reader */
    chunky src = {{p, n, 0}, {{0}}, SIZE_MAX, 0};
    rng_seed(&src.g, 77, (uint64_t)iter, 0);
    if (hostile && rng_below(g, 8) == 0)
        src.fail_at = rng_below(g, n + 1);
    tar_reader *r = tar_reader_new(shard_name, chunky_read, &src, max_member);
    cr_assert_not_null(r);
    char terr[1024] = "", name[1200];
    tar_member m;
    int rc;
    long members = 0;
    for (;;) {
        uint64_t before = tar_reader_offset(r);
        terr[0] = '\0';
        rc = tar_reader_next(r, &m, terr, sizeof terr);
        uint64_t after = tar_reader_offset(r);
        cr_assert(rc >= -1 && rc <= 1, "iteration %d: tar_reader_next returned %d", iter, rc);
        cr_assert(after >= before && after <= n, "iteration %d: offset %llu after %llu, of %zu",
                  iter, (unsigned long long)after, (unsigned long long)before, n);
        if (rc != 1)
            break;
        members++;
        cr_assert_leq((size_t)members, n / 512, "iteration %d: more members than blocks", iter);
        cr_assert_not_null(m.name, "iteration %d", iter);
        cr_assert_leq(m.size, max_member, "iteration %d: '%s' over the limit", iter, m.name);
        cr_assert_eq(m.data == NULL, m.size == 0, "iteration %d: '%s'", iter, m.name);
        cr_assert(m.offset >= before && m.offset % 512 == 0 && m.offset + 512 + m.size <= after,
                  "iteration %d: '%s' at offset %llu (%llu bytes) read between %llu and %llu",
                  iter, m.name, (unsigned long long)m.offset, (unsigned long long)m.size,
                  (unsigned long long)before, (unsigned long long)after);
        unsigned sum = 0;
        for (uint64_t i = 0; i < m.size; i++)
            sum += m.data[i];
        (void)sum;
        if (is_image_name(m.name) || decode_sniff(m.data, (size_t)m.size) != DECODE_UNKNOWN) {
            snprintf(name, sizeof name, "%s:%s", shard_name, m.name);
            decode_both(m.data, (size_t)m.size, name, g, c);
        }
    }
    c->members += members;
    if (src.failed) {
        cr_assert(rc == -1 && strstr(terr, "read error at offset"),
                  "iteration %d: the stream failed at byte %zu, the reader says %d '%s'", iter,
                  src.fail_at, rc, terr);
        c->read_err++;
    }
    snprintf(c->tar_msg, sizeof c->tar_msg, "%s", terr);
    if (rc < 0) {
        cr_assert(starts_with(terr, pre) && strstr(terr, "offset"),
                  "iteration %d: the message names neither the shard nor the offset: '%s'", iter,
                  terr);
        c->tar_err++;
        int k = 0;
        while (k < 5 && !strstr(terr, TAR_WHY[k]))
            k++;
        c->why[k]++;
    } else {
        c->tar_end++;
    }
    char again[1024] = "";
    cr_assert_eq(tar_reader_next(r, &m, again, sizeof again), rc, "iteration %d: not sticky",
                 iter);
    if (rc < 0)
        cr_assert_str_eq(again, terr, "iteration %d", iter);
    tar_reader_free(r);

    /* the samples */
    tar_mem whole = {p, n, 0};
    wds_reader *w = wds_reader_new(shard_name, tar_mem_read, &whole, max_member);
    cr_assert_not_null(w);
    wds_sample s;
    char werr[1024];
    wds_status st;
    long steps = 0;
    uint64_t last = 0;
    int any = 0;
    for (;;) {
        werr[0] = '\0';
        st = wds_next(w, &s, werr, sizeof werr);
        cr_assert(st >= WDS_ERROR && st <= WDS_BAD, "iteration %d: wds_next returned %d", iter,
                  st);
        if (st == WDS_END || st == WDS_ERROR)
            break;
        ++steps;
        cr_assert(steps <= (src.failed ? (long)(n / 512) : members),
                  "iteration %d: more samples than members", iter);
        if (st == WDS_BAD) {
            cr_assert(starts_with(werr, pre) && strstr(werr, "sample '") &&
                          strstr(werr, "offset"),
                      "iteration %d: a bad sample's message names no shard, key or offset: '%s'",
                      iter, werr);
            c->bad++;
            continue;
        }
        cr_assert(s.key && s.image && s.image_ext, "iteration %d", iter);
        char dotted[16];
        snprintf(dotted, sizeof dotted, ".%s", s.image_ext);
        cr_assert(is_image_name(dotted), "iteration %d: image extension '%s'", iter, s.image_ext);
        cr_assert_leq(s.image_size, max_member, "iteration %d", iter);
        cr_assert_geq(s.label, 0, "iteration %d", iter);
        cr_assert(!any || s.offset > last, "iteration %d: sample '%s' at offset %llu, after %llu",
                  iter, s.key, (unsigned long long)s.offset, (unsigned long long)last);
        any = 1;
        last = s.offset;
        c->samples++;
        snprintf(name, sizeof name, "%s:%s", shard_name, s.key);
        /* a third decode: a smaller limit, the sample's name */
        decode_opts o = {.max_pixels = 1024, .min_width = 8};
        if (seed_of(s.image, s.image_size) < 0)
            check_decode(s.image, s.image_size, name, &o, c);
    }
    if (st == WDS_ERROR) {
        c->wds_err++;
        cr_assert(starts_with(werr, pre) && strstr(werr, "offset"), "iteration %d: '%s'", iter,
                  werr);
    } else {
        c->wds_end++;
    }
    if (!src.failed) { /* the same bytes, read in drawn pieces or whole: the same end */
        cr_assert_eq(st == WDS_ERROR ? -1 : 0, rc, "iteration %d: wds '%s', tar '%s'", iter, werr,
                     terr);
        if (rc < 0)
            cr_assert_str_eq(werr, terr, "iteration %d: whole reads and drawn reads disagree",
                             iter);
    }
    cr_assert_eq(wds_next(w, &s, werr, sizeof werr), st, "iteration %d: not sticky", iter);
    wds_reader_free(w);
}

/* ---- the mutators ---- */

static const unsigned char INTERESTING[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0x20, '0', '7'};

static unsigned char interesting(rng_state *g)
{
    return INTERESTING[rng_below(g, sizeof INTERESTING)];
}

/* inserts n bytes (a copy of src) at `at`, or deletes n bytes there */
static void splice_in(bytes *b, size_t at, const unsigned char *src, size_t n)
{
    unsigned char *tmp = exact_copy(src, n);
    b_reserve(b, n);
    memmove(b->p + at + n, b->p + at, b->n - at);
    memcpy(b->p + at, tmp, n);
    b->n += n;
    free(tmp);
}

static void splice_out(bytes *b, size_t at, size_t n)
{
    if (at >= b->n)
        return;
    if (n > b->n - at)
        n = b->n - at;
    memmove(b->p + at, b->p + at + n, b->n - at - n);
    b->n -= n;
}

/* a header of the shard, drawn; of the given types when any */
static const region *pick_header(const shard *s, rng_state *g, const char *types)
{
    if (types) {
        const region *c[MAX_REGIONS];
        int nc = 0;
        for (int i = 0; i < s->nr; i++)
            if (strchr(types, s->r[i].type))
                c[nc++] = &s->r[i];
        if (nc)
            return c[rng_below(g, (uint64_t)nc)];
    }
    return &s->r[rng_below(g, (uint64_t)s->nr)];
}

static void set_field(unsigned char *h, size_t off, size_t w, const char *v, size_t vn)
{
    memset(h + off, 0, w);
    memcpy(h + off, v, vn < w ? vn : w);
}

enum {
    T_FLIP, T_INTERESTING, T_CUT_BOUNDARY, T_CUT_ANY, T_BLOCK_DUP, T_BLOCK_DEL, T_SIZE,
    T_HEADER_BYTE, T_TYPE, T_NAME_MAGIC, T_CHECKSUM, T_PAX_DATA, N_TAR_OPS
};
static const char *const TAR_OPS[N_TAR_OPS] = {
    "bit flips", "interesting bytes", "cut at a boundary", "cut anywhere", "block doubled",
    "block deleted", "size field", "header byte", "type flag", "name/prefix/magic",
    "checksum field", "pax record or long name"};

/* where the string z first occurs in p[0..n), or NULL */
static unsigned char *find_sub(unsigned char *p, size_t n, const char *z)
{
    size_t zn = strlen(z);
    for (size_t i = 0; i + zn <= n; i++)
        if (!memcmp(p + i, z, zn))
            return p + i;
    return NULL;
}

/* One mutation of the tar structure of t (a copy of s's bytes, perhaps
 * mutated once already: too short a one is left alone). */
static void mutate_tar(bytes *t, const shard *s, rng_state *g, int op)
{
    if (t->n < 1024)
        return;
    const region *rg = pick_header(s, g, NULL);
    unsigned char *h = t->p + rg->hdr;
    switch (op) {
    case T_FLIP:
        for (int k = 1 + (int)rng_below(g, 8); k > 0; k--) {
            size_t at = rng_below(g, 2) ? rg->hdr + rng_below(g, 512) : rng_below(g, t->n);
            t->p[at] ^= (unsigned char)(1u << rng_below(g, 8));
        }
        break;
    case T_INTERESTING:
        for (int k = 1 + (int)rng_below(g, 4); k > 0; k--) {
            size_t at = rng_below(g, 2) ? rg->hdr + rng_below(g, 512) : rng_below(g, t->n);
            t->p[at] = interesting(g);
        }
        break;
    case T_CUT_BOUNDARY: {
        size_t data = rg->hdr + 512, pad = data + rg->size, cuts[] = {
            rg->hdr, rg->hdr + 1, rg->hdr + 148, rg->hdr + 511, data, data + rg->size / 2,
            pad, pad + (512 - rg->size % 512) % 512 - (rg->size % 512 ? 1 : 0),
            s->end, s->end + 1, s->end + 512, s->end + 1023};
        size_t at = cuts[rng_below(g, sizeof cuts / sizeof cuts[0])];
        t->n = at < t->n ? at : t->n;
        break;
    }
    case T_CUT_ANY:
        t->n = rng_below(g, t->n);
        break;
    case T_BLOCK_DUP: {
        size_t blk = rng_below(g, t->n / 512) * 512;
        int k = 1 + (int)rng_below(g, 3);
        if (blk + 512 * (size_t)k > t->n)
            k = 1;
        splice_in(t, rng_below(g, 2) ? blk : rng_below(g, t->n / 512) * 512, t->p + blk,
                  512 * (size_t)k);
        break;
    }
    case T_BLOCK_DEL:
        splice_out(t, rng_below(g, 2) ? rg->hdr : rng_below(g, t->n / 512) * 512,
                   512 * (1 + rng_below(g, 2)));
        break;
    case T_SIZE: {
        static const char *const sizes[] = {
            "77777777777", "00000000000", "00000200001", "00000200000", "00004000001",
            "1x", "", "00004000000", "777777777777", "\x80\0\0\0\0\0\0\0\0\x01\0\0",
            "\x80\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "\xff\xff\xff\xff\xff\xff\xff"
            "\xff\xff\xff\xff\xfe", "\x80\0\0\0\0\0\0\0\0\0\x02\x01"};
        int which = (int)rng_below(g, 16);
        char v[13];
        size_t vn;
        if (which < 13) {
            const char *z = sizes[which];
            vn = which >= 9 ? 12 : strlen(z);
            memcpy(v, z, vn);
        } else { /* the true size, off by a little */
            long d[] = {-1, 1, 511, 512, -512};
            long sz = (long)rg->size + d[rng_below(g, 5)];
            vn = (size_t)snprintf(v, sizeof v, "%011lo", (unsigned long)(sz < 0 ? 0 : sz));
        }
        set_field(h, 124, 12, v, vn);
        fix_checksum(h);
        break;
    }
    case T_HEADER_BYTE:
        for (int k = 1 + (int)rng_below(g, 3); k > 0; k--) {
            size_t at = rng_below(g, 512);
            h[at] = rng_below(g, 2) ? interesting(g) : (unsigned char)rng_u64(g);
        }
        fix_checksum(h);
        break;
    case T_TYPE: {
        static const char types[] = {'0', '\0', '1', '2', '3', '4', '5', '6', '7', 'x', 'g',
                                     'L', 'K', 'S', 'V', 'A', 'X', (char)0xff};
        h[156] = (unsigned char)types[rng_below(g, sizeof types)];
        fix_checksum(h);
        break;
    }
    case T_NAME_MAGIC:
        switch (rng_below(g, 5)) {
        case 0: /* a name with no NUL in its 100 bytes */
            memset(h, 'n', 100);
            break;
        case 1: /* a full prefix, no NUL */
            memset(h + 345, 'p', 155);
            break;
        case 2: /* the name empty */
            memset(h, 0, 100);
            break;
        case 3: { /* another magic */
            static const char mg[5][8] = {"ustar  ", "ustar\0" "00", "USTAR\0", "ustaR",
                                          "\0\0\0\0\0\0\0"};
            memcpy(h + 257, mg[rng_below(g, 5)], 8);
            break;
        }
        default: /* a name of dots and slashes */
        {
            const char *dots = rng_below(g, 2) ? "./" : "a/./b/../.c.d/.";
            set_field(h, 0, 100, dots, strlen(dots));
        }
            break;
        }
        fix_checksum(h);
        break;
    case T_CHECKSUM: {
        unsigned sum = 0;
        int ssum = 0;
        for (int i = 0; i < 512; i++) {
            unsigned char c = i >= 148 && i < 156 ? ' ' : h[i];
            sum += c;
            ssum += (signed char)c;
        }
        char v[16];
        size_t vn;
        switch (rng_below(g, 6)) {
        case 0: vn = (size_t)snprintf(v, sizeof v, "%06o", sum + 1); break;
        case 1: vn = (size_t)snprintf(v, sizeof v, "%07o", (unsigned)ssum & 07777777); break;
        case 2: vn = (size_t)snprintf(v, sizeof v, "%08o", sum); break; /* no NUL, no space */
        case 3: memcpy(v, "        ", 8), vn = 8; break;
        case 4: memcpy(v, "\x80\0\0\0\0\0\0\x01", 8), vn = 8; break;
        default: vn = (size_t)snprintf(v, sizeof v, "%o9", sum); break;
        }
        set_field(h, 148, 8, v, vn > 8 ? 8 : vn);
        break;
    }
    case T_PAX_DATA: {
        const region *x = pick_header(s, g, "xLg");
        if (x->type != 'x' && x->type != 'L' && x->type != 'g') {
            t->p[rng_below(g, t->n)] ^= 1;
            break;
        }
        unsigned char *d = t->p + x->hdr + 512;
        size_t dn = x->size;
        switch (rng_below(g, 6)) {
        case 0: /* a record's length digits */
            d[rng_below(g, 3)] = rng_below(g, 2) ? (unsigned char)('0' + rng_below(g, 10)) : ' ';
            break;
        case 1: { /* a key renamed: path <-> size, or unknown */
            unsigned char *k = memchr(d, ' ', dn);
            if (k && k + 5 < d + dn)
                memcpy(k + 1, rng_below(g, 2) ? "size" : "pat\xff", 4);
            break;
        }
        case 2: { /* the value of a size record */
            static const char *const v[] = {"18446744073709551615", "18446744073709551616",
                                            "99999999999999999999", "65537", "-1", "1e3", " "};
            unsigned char *z = find_sub(d, dn, "size=");
            if (z) {
                const char *val = v[rng_below(g, 7)];
                size_t room = (size_t)(d + dn - (z + 5)), vl = strlen(val);
                memcpy(z + 5, val, vl < room ? vl : room);
            } else {
                d[rng_below(g, dn)] = '=';
            }
            break;
        }
        case 3: /* the last newline, or the NUL of a long name, gone */
            d[dn - 1] = 'x';
            break;
        default: /* bytes anywhere in it */
            for (int k = 1 + (int)rng_below(g, 4); k > 0; k--)
                d[rng_below(g, dn)] = rng_below(g, 2) ? interesting(g) : (unsigned char)rng_u64(g);
            break;
        }
        break;
    }
    }
}

/* ---- image mutators ---- */

static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return c ^ 0xffffffffu;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* a JPEG's marker segments: where each FF xx is, and its length field (0
 * for those without: SOI, EOI, RSTn); the entropy-coded data after an SOS
 * is stepped over (FF 00 and RSTn inside it recorded as scan bytes) */
typedef struct {
    size_t at;
    int marker;
    size_t len;
} seg;

static int jpeg_segments(const unsigned char *p, size_t n, seg *out, int max, size_t *scan_lo,
                         size_t *scan_hi)
{
    int k = 0;
    size_t i = 2;
    *scan_lo = *scan_hi = 0;
    out[k++] = (seg){0, 0xd8, 0};
    while (i + 1 < n && k < max) {
        if (p[i] != 0xff) {
            i++;
            continue;
        }
        int mk = p[i + 1];
        if (mk == 0xd9) {
            out[k++] = (seg){i, mk, 0};
            break;
        }
        if (i + 3 >= n)
            break;
        size_t len = (size_t)p[i + 2] << 8 | p[i + 3];
        out[k++] = (seg){i, mk, len};
        i += 2 + len;
        if (mk == 0xda) { /* the scan: to the next marker that is not FF00 or RSTn */
            if (!*scan_lo)
                *scan_lo = i;
            while (i + 1 < n && !(p[i] == 0xff && p[i + 1] != 0 && (p[i + 1] < 0xd0 ||
                                                                   p[i + 1] > 0xd7)))
                i++;
            *scan_hi = i;
        }
    }
    if (*scan_hi > n) /* a length past the end */
        *scan_hi = n;
    if (*scan_lo > *scan_hi)
        *scan_lo = *scan_hi;
    return k;
}

/* a PNG's chunks: where each starts (its length field) */
static int png_chunks(const unsigned char *p, size_t n, size_t *at, int max)
{
    int k = 0;
    size_t i = 8;
    while (i + 12 <= n && k < max) {
        at[k++] = i;
        uint32_t len = be32(p + i);
        if (len > n - i - 12)
            break;
        i += 12 + len;
    }
    return k;
}

static void png_fix_crc(unsigned char *p, size_t n, size_t at)
{
    if (at + 12 > n)
        return;
    uint32_t len = be32(p + at);
    if (len <= n - at - 12)
        put_be32(p + at + 8 + len, crc32_of(p + at + 4, 4 + (size_t)len));
}

enum { I_LENGTH, I_HEADER, I_TABLES_DATA, I_STRUCTURE, I_CUT, I_FLIP, N_IMG_OPS };
static const char *const IMG_OPS[N_IMG_OPS] = {
    "segment/chunk length", "SOF/IHDR fields", "tables or data (CRC made right)",
    "segments/chunks dropped, doubled or renamed", "cut at a segment/chunk", "bit flips"};

static void mutate_jpeg(bytes *b, rng_state *g, int op)
{
    seg sg[128];
    size_t lo, hi;
    int ns = jpeg_segments(b->p, b->n, sg, 128, &lo, &hi);
    const seg *s = &sg[rng_below(g, (uint64_t)ns)];
    /* a segment with a length, preferring the kind the op is about */
    const seg *withlen[128], *sof = NULL;
    int nl = 0;
    for (int i = 0; i < ns; i++) {
        if (sg[i].len)
            withlen[nl++] = &sg[i];
        if (!sof && sg[i].marker >= 0xc0 && sg[i].marker <= 0xcf && sg[i].marker != 0xc4 &&
            sg[i].marker != 0xc8 && sg[i].marker != 0xcc)
            sof = &sg[i];
    }
    if (!nl || !sof || sof->at + 24 > b->n) { /* a mutated one: bit flips instead */
        b->p[rng_below(g, b->n)] ^= 0x10;
        return;
    }
    const seg *ls = withlen[rng_below(g, (uint64_t)nl)];
    unsigned char *p = b->p;
    switch (op) {
    case I_LENGTH: {
        size_t v[] = {0, 1, 2, 3, ls->len - 1, ls->len + 1, ls->len + 64, 0xffff, 0xff00,
                      rng_below(g, 0x10000)};
        size_t nv = v[rng_below(g, sizeof v / sizeof v[0])];
        p[ls->at + 2] = (unsigned char)(nv >> 8), p[ls->at + 3] = (unsigned char)nv;
        break;
    }
    case I_HEADER: {
        unsigned char *f = p + sof->at + 4;
        switch (rng_below(g, 6)) {
        case 0: { /* huge or odd dimensions */
            static const unsigned dims[] = {0, 1, 2, 8, 9, 127, 128, 1000, 0x7fff, 0x8000,
                                            0xffff};
            unsigned hh = dims[rng_below(g, 11)], ww = dims[rng_below(g, 11)];
            if (rng_below(g, 2))
                f[1] = (unsigned char)(hh >> 8), f[2] = (unsigned char)hh;
            else
                f[3] = (unsigned char)(ww >> 8), f[4] = (unsigned char)ww;
            if (rng_below(g, 3) == 0)
                f[1] = f[2] = f[3] = f[4] = 0xff; /* 65535 x 65535 */
            break;
        }
        case 1: { /* precision */
            static const unsigned char prec[] = {0, 1, 2, 12, 16, 255};
            f[0] = prec[rng_below(g, 6)];
            break;
        }
        case 2: /* the number of components */
            f[5] = (unsigned char)rng_below(g, 6) + (rng_below(g, 8) ? 0 : 250);
            break;
        case 3: { /* a component's sampling factors or table */
            size_t c = 6 + 3 * rng_below(g, 4) + 1 + rng_below(g, 2);
            static const unsigned char hv[] = {0x00, 0x11, 0x12, 0x21, 0x22, 0x44, 0x41, 0x14,
                                               0x55, 0x0f, 0xf0, 0xff, 0x03, 0x04};
            if (sof->at + 4 + c < b->n)
                f[c] = hv[rng_below(g, sizeof hv)];
            break;
        }
        case 4: { /* another SOF kind: extended, progressive, lossless, arithmetic, hierarchical */
            static const unsigned char kinds[] = {0xc0, 0xc1, 0xc2, 0xc3, 0xc5, 0xc9, 0xca, 0xcb,
                                                  0xcd, 0xcf};
            p[sof->at + 1] = kinds[rng_below(g, sizeof kinds)];
            break;
        }
        default: /* a DRI interval, or a second SOF */
            if (rng_below(g, 2)) {
                static const unsigned char dri[] = {0xff, 0xdd, 0, 4, 0, 0};
                unsigned char d[6];
                memcpy(d, dri, 6);
                d[5] = (unsigned char)rng_below(g, 4);
                splice_in(b, sof->at, d, 6);
            } else {
                size_t span = sof->len + 2 < b->n - sof->at ? sof->len + 2 : b->n - sof->at;
                splice_in(b, sof->at, p + sof->at, span);
            }
            break;
        }
        break;
    }
    case I_TABLES_DATA:
        if (rng_below(g, 2) && hi > lo) { /* the entropy-coded data */
            static const unsigned char ins[][2] = {{0xff, 0xd9}, {0xff, 0xd0}, {0xff, 0xd3},
                                                   {0xff, 0x00}, {0xff, 0xff}, {0xff, 0xc4}};
            size_t at = lo + rng_below(g, hi - lo);
            if (rng_below(g, 2))
                splice_in(b, at, ins[rng_below(g, 6)], 2);
            else
                for (int k = 1 + (int)rng_below(g, 4); k > 0; k--)
                    p[lo + rng_below(g, hi - lo)] ^= (unsigned char)(1u << rng_below(g, 8));
        } else if (ls->len > 2) { /* a table's (DQT, DHT, SOS, APPn) bytes */
            for (int k = 1 + (int)rng_below(g, 3); k > 0; k--) {
                size_t at = ls->at + 4 + rng_below(g, ls->len - 2);
                if (at < b->n)
                    p[at] = rng_below(g, 2) ? interesting(g) : (unsigned char)rng_u64(g);
            }
        }
        break;
    case I_STRUCTURE: {
        size_t span = s->len ? s->len + 2 : 2;
        if (s->at + span > b->n)
            span = b->n - s->at;
        switch (rng_below(g, 3)) {
        case 0:
            splice_out(b, s->at, span);
            break;
        case 1:
            splice_in(b, s->at, b->p + s->at, span);
            break;
        default: {
            static const unsigned char mk[] = {0xc0, 0xc2, 0xc4, 0xcc, 0xd8, 0xd9, 0xda, 0xdb,
                                               0xdd, 0xe0, 0xe1, 0xee, 0xfe, 0x01, 0xff, 0xd4};
            if (s->at + 1 < b->n)
                p[s->at + 1] = mk[rng_below(g, sizeof mk)];
            break;
        }
        }
        break;
    }
    case I_CUT: {
        size_t cuts[] = {s->at, s->at + 1, s->at + 3, s->at + 2 + s->len / 2, lo,
                         lo + (hi - lo) / 2, hi, b->n - 2, b->n - 1, 3};
        size_t at = cuts[rng_below(g, sizeof cuts / sizeof cuts[0])];
        if (at < b->n)
            b->n = at;
        break;
    }
    default:
        for (int k = 1 + (int)rng_below(g, 6); k > 0; k--)
            p[rng_below(g, b->n)] ^= (unsigned char)(1u << rng_below(g, 8));
        break;
    }
}

static void mutate_png(bytes *b, rng_state *g, int op)
{
    size_t at[64];
    int nc = png_chunks(b->p, b->n, at, 64);
    if (nc < 3 || b->n < 33) { /* a mutated one: bit flips instead */
        b->p[rng_below(g, b->n)] ^= 0x10;
        return;
    }
    size_t c = at[rng_below(g, (uint64_t)nc)];
    unsigned char *p = b->p;
    uint32_t len = be32(p + c);
    switch (op) {
    case I_LENGTH: {
        uint32_t v[] = {0, 1, len - 1, len + 1, len + 4, 0x7fffffffu, 0x80000000u, 0xffffffffu,
                        (uint32_t)b->n, (uint32_t)rng_u64(g)};
        put_be32(p + c, v[rng_below(g, sizeof v / sizeof v[0])]);
        if (rng_below(g, 2))
            png_fix_crc(p, b->n, c);
        break;
    }
    case I_HEADER: { /* IHDR (the first chunk), CRC made right */
        unsigned char *f = p + 16;
        switch (rng_below(g, 4)) {
        case 0: {
            static const uint32_t dims[] = {0, 1, 2, 7, 8, 65535, 1u << 20, 0x7fffffffu,
                                            0x80000000u, 0xffffffffu, 129};
            put_be32(f + 4 * rng_below(g, 2), dims[rng_below(g, 11)]);
            if (rng_below(g, 3) == 0) /* both huge */
                put_be32(f, 0x7fffffffu), put_be32(f + 4, 0x7fffffffu);
            break;
        }
        case 1: {
            static const unsigned char depth[] = {0, 1, 2, 3, 4, 8, 16, 32, 255};
            f[8] = depth[rng_below(g, 9)];
            break;
        }
        case 2: {
            static const unsigned char ct[] = {0, 1, 2, 3, 4, 5, 6, 7, 255};
            f[9] = ct[rng_below(g, 9)];
            break;
        }
        default: /* compression, filter, interlace */
            f[10 + rng_below(g, 3)] = (unsigned char)rng_below(g, 3) + (rng_below(g, 4) ? 0 : 200);
            break;
        }
        png_fix_crc(p, b->n, 8);
        break;
    }
    case I_TABLES_DATA: { /* bytes of a chunk's data (IDAT's zlib stream, PLTE, tRNS) */
        if (len == 0)
            break;
        for (int k = 1 + (int)rng_below(g, 3); k > 0; k--) {
            size_t i = c + 8 + rng_below(g, len);
            if (i < b->n)
                p[i] = rng_below(g, 2) ? (unsigned char)(p[i] ^ (1u << rng_below(g, 8)))
                                       : interesting(g);
        }
        png_fix_crc(p, b->n, c);
        break;
    }
    case I_STRUCTURE: {
        size_t span = (size_t)len + 12;
        if (c + span > b->n)
            span = b->n - c;
        switch (rng_below(g, 4)) {
        case 0:
            splice_out(b, c, span);
            break;
        case 1:
            splice_in(b, rng_below(g, 2) ? c : at[rng_below(g, (uint64_t)nc)], b->p + c, span);
            break;
        case 2: { /* renamed: another known kind, or a case bit flipped; CRC made right */
            static const char *const kinds[] = {"IHDR", "PLTE", "IDAT", "IEND", "tRNS", "gAMA",
                                                "iCCP", "sBIT", "zTXt", "iTXt", "eXIf", "acTL"};
            if (rng_below(g, 2))
                memcpy(p + c + 4, kinds[rng_below(g, 12)], 4);
            else
                p[c + 4 + rng_below(g, 4)] ^= 0x20;
            png_fix_crc(p, b->n, c);
            break;
        }
        default: { /* a chunk inserted: a huge ancillary one, or one with a lying length */
            unsigned char ch[12 + 16] = {0};
            uint32_t l = rng_below(g, 2) ? 16 : 0x7ffffff0u;
            put_be32(ch, l);
            memcpy(ch + 4, rng_below(g, 2) ? "tEXt" : "iCCP", 4);
            memcpy(ch + 8, "key\0value\0\0\0\0\0\0\0", 16);
            put_be32(ch + 24, crc32_of(ch + 4, 20));
            splice_in(b, c, ch, sizeof ch);
            break;
        }
        }
        break;
    }
    case I_CUT: {
        size_t cuts[] = {c, c + 4, c + 8, c + 8 + len / 2, c + 8 + len, c + 12 + len,
                         b->n - 12, b->n - 1, 8, 7};
        size_t a = cuts[rng_below(g, sizeof cuts / sizeof cuts[0])];
        if (a < b->n)
            b->n = a;
        break;
    }
    default:
        for (int k = 1 + (int)rng_below(g, 6); k > 0; k--)
            p[rng_below(g, b->n)] ^= (unsigned char)(1u << rng_below(g, 8));
        break;
    }
}

/* ---- the tests ---- */

#define N_SEED_SHARDS 4

/* Before any mutation: every seed image decodes to what was encoded (PNG
 * exactly, JPEG close), and every seed shard reads to its end with all its
 * samples, the one without a label reported; what the fuzz tests mutate is
 * valid to begin with. */
Test(fuzz_data, the_seed_images_and_shards_are_valid_before_any_mutation)
{
    make_images();
    cr_assert_eq(n_imgs, 17);
    for (int i = 0; i < n_imgs; i++) {
        decode_image img;
        char err[512] = "";
        cr_assert_eq(decode_image_rgb(imgs[i].p, imgs[i].n, imgs[i].what, NULL, &img, err,
                                      sizeof err), 0, "%s", err);
        cr_assert_eq(img.width, imgs[i].w, "%s", imgs[i].what);
        cr_assert_eq(img.height, imgs[i].h, "%s", imgs[i].what);
        size_t np = (size_t)img.width * img.height * 3;
        if (img.format == DECODE_PNG) {
            cr_assert_eq(memcmp(img.rgb, imgs[i].rgb, np), 0, "%s: pixels differ", imgs[i].what);
        } else {
            int gray = strstr(imgs[i].what, "gray") != NULL,
                cmyk = strstr(imgs[i].what, "ycck") != NULL;
            long d = 0;
            if (!cmyk) /* against the source: gray is the source's one channel */
                for (size_t k = 0; k < np; k++)
                    d += labs((long)img.rgb[k] - (long)imgs[i].rgb[gray ? k / 3 : k]);
            cr_assert_lt(d, 12 * (long)np, "%s: mean difference %ld/%zu", imgs[i].what, d, np);
        }
        decode_image_free(&img);
        /* scaled as asked */
        decode_opts o = {.min_width = (imgs[i].w + 1) / 2};
        cr_assert_eq(decode_image_rgb(imgs[i].p, imgs[i].n, imgs[i].what, &o, &img, err,
                                      sizeof err), 0, "%s", err);
        if (img.format == DECODE_JPEG)
            cr_assert_lt(img.width, imgs[i].w, "%s: not scaled", imgs[i].what);
        decode_image_free(&img);
    }
    for (int k = 0; k < N_SEED_SHARDS; k++) {
        shard s;
        build_shard(&s, k, -1, NULL, 0);
        tar_mem src = {s.b.p, s.b.n, 0};
        wds_reader *w = wds_reader_new("seed.tar", tar_mem_read, &src, MAX_MEMBER);
        wds_sample smp;
        char err[1024];
        int good = 0, bad = 0;
        wds_status st;
        while ((st = wds_next(w, &smp, err, sizeof err)) == WDS_SAMPLE || st == WDS_BAD) {
            if (st == WDS_BAD) {
                cr_assert(strstr(err, "_0007' at offset") && strstr(err, "no label"), "%s", err);
                bad++;
                continue;
            }
            int j = seed_of(smp.image, smp.image_size);
            cr_assert_geq(j, 0, "shard %d: '%s' is no seed image", k, smp.key);
            cr_assert_eq(smp.label, atoi(strrchr(smp.key, '_') + 1), "%s", smp.key);
            good++;
        }
        cr_assert_eq(st, WDS_END, "shard %d: %s", k, err);
        cr_assert_eq(good, n_imgs - 1);
        cr_assert_eq(bad, 1);
        wds_reader_free(w);
        /* the styles the shard is built from are all there */
        int types[256] = {0};
        for (int i = 0; i < s.nr; i++)
            types[(unsigned char)s.r[i].type]++;
        cr_assert(types['x'] && types['L'] && types['5'] && types['2'] && types['0'],
                  "shard %d lacks a kind of header", k);
        cr_assert(k % 2 == 0 || types['g']);
        counts c = {0};
        rng_state g;
        rng_seed(&g, 1, (uint64_t)k, 0);
        unsigned char *e = exact_copy(s.b.p, s.b.n);
        check_shard(e, s.b.n, k, &g, &c, 0);
        cr_assert_eq(c.tar_end, 1);
        free(e);
        free(s.b.p);
    }
}

/* ITER_TAR mutated shards (12 kinds of mutation of the tar structure, one
 * or two at a time, on 4 seed shards): the tar reader (drawn read sizes)
 * and the sample reader (whole reads) keep every invariant of check_shard,
 * end the same way, and every image they hand out decodes whole or fails
 * naming the shard and member; nothing crashes, hangs, leaks or reads out
 * of bounds (ASan + UBSan). */
#ifndef ITER_TAR /* (-DITER_TAR=N: a longer hunt, by hand) */
#define ITER_TAR 10000
#endif
Test(fuzz_data, mutated_tar_structure_never_breaks_the_readers_invariants)
{
    make_images();
    shard seeds[N_SEED_SHARDS];
    for (int k = 0; k < N_SEED_SHARDS; k++)
        build_shard(&seeds[k], k, -1, NULL, 0);
    rng_state g;
    rng_seed(&g, FUZZ_SEED, 1, 0);
    counts c = {0};
    long per_op[N_TAR_OPS][2] = {{0}};
    bytes t = {0};
    for (int iter = 0; iter < ITER_TAR; iter++) {
        const shard *s = &seeds[iter % N_SEED_SHARDS];
        t.n = 0;
        b_put(&t, s->b.p, s->b.n);
        int op = (iter / N_SEED_SHARDS) % N_TAR_OPS;
        mutate_tar(&t, s, &g, op);
        if (iter % 7 == 6) /* a second mutation on top */
            mutate_tar(&t, s, &g, (int)rng_below(&g, N_TAR_OPS));
        long errs = c.tar_err;
        unsigned char *e = exact_copy(t.p, t.n);
        check_shard(e, t.n, iter, &g, &c, 1);
        free(e);
        per_op[op][c.tar_err > errs]++;
    }
    print_counts("tar structure", ITER_TAR, &c);
    for (int op = 0; op < N_TAR_OPS; op++)
        fprintf(stderr, "  %-26s %4ld read to the end, %4ld refused\n", TAR_OPS[op], per_op[op][0],
                per_op[op][1]);
    /* the mutations reach past the checksum: most refusals are for something else */
    cr_assert_gt(c.tar_err, ITER_TAR / 3);
    cr_assert_lt(c.why[0], c.tar_err / 2, "%ld of %ld refusals are checksums", c.why[0],
                 c.tar_err);
    cr_assert_gt(c.tar_end, ITER_TAR / 10);
    cr_assert_gt(c.dec_ok, 0);
    cr_assert_gt(c.dec_jpeg + c.dec_png, 0);
    free(t.p);
    for (int k = 0; k < N_SEED_SHARDS; k++)
        free(seeds[k].b.p);
}

/* ITER_IMG shards, each with one image mutated (6 kinds of mutation aimed at
 * JPEG segments or PNG chunks, CRCs made right where the point is to get
 * past them) and the shard written around it again: every decode (full
 * size, DCT-scaled, a smaller limit) gives a whole image within the limits
 * or fails naming the shard and the member or key. */
#ifndef ITER_IMG /* (-DITER_IMG=N: a longer hunt, by hand) */
#define ITER_IMG 8000
#endif
Test(fuzz_data, mutated_images_in_a_shard_decode_whole_or_fail_naming_shard_and_member)
{
    make_images();
    rng_state g;
    rng_seed(&g, FUZZ_SEED, 2, 0);
    counts c = {0};
    long per_op[N_IMG_OPS][3] = {{0}};
    bytes im = {0};
    for (int iter = 0; iter < ITER_IMG; iter++) {
        int k = iter % N_SEED_SHARDS, which = (int)rng_below(&g, (uint64_t)n_imgs),
            j = (which + k) % n_imgs, op = (iter / N_SEED_SHARDS) % N_IMG_OPS;
        im.n = 0;
        b_put(&im, imgs[j].p, imgs[j].n);
        int jpeg = decode_sniff(imgs[j].p, imgs[j].n) == DECODE_JPEG;
        if (jpeg)
            mutate_jpeg(&im, &g, op);
        else
            mutate_png(&im, &g, op);
        if (iter % 5 == 4) { /* a second one on top */
            if (jpeg && decode_sniff(im.p, im.n) == DECODE_JPEG && im.n > 4)
                mutate_jpeg(&im, &g, (int)rng_below(&g, N_IMG_OPS));
            else if (!jpeg && decode_sniff(im.p, im.n) == DECODE_PNG && im.n > 40)
                mutate_png(&im, &g, (int)rng_below(&g, N_IMG_OPS));
        }
        if (im.n > 16384) /* a lying length copied whole: cut, to stay a valid member */
            im.n = 16384;
        shard s;
        build_shard(&s, k, which, im.p, im.n);
        counts before = c;
        unsigned char *e = exact_copy(s.b.p, s.b.n);
        check_shard(e, s.b.n, iter, &g, &c, 0);
        free(e);
        free(s.b.p);
        cr_assert_eq(c.tar_end, before.tar_end + 1, "iteration %d: the tar around it is valid: %s",
                     iter, c.tar_msg);
        per_op[op][c.dec_ok > before.dec_ok ? 0 : c.dec_bomb > before.dec_bomb ? 1 : 2]++;
    }
    print_counts("images", ITER_IMG, &c);
    for (int op = 0; op < N_IMG_OPS; op++)
        fprintf(stderr, "  %-44s %4ld decoded (some), %4ld over the limit, %4ld refused\n",
                IMG_OPS[op], per_op[op][0], per_op[op][1], per_op[op][2]);
    cr_assert_gt(c.dec_ok, 0);
    cr_assert_gt(c.dec_bomb, 0);
    cr_assert_gt(c.dec_jpeg, 0);
    cr_assert_gt(c.dec_png, 0);
    cr_assert_gt(c.dec_scaled, 0);
    free(im.p);
}

/* wds.h's rule for .cls, written again: 1 and the label, or 0 */
static int ref_cls(const unsigned char *p, size_t n, int32_t *out)
{
    size_t i = 0, e = n;
    while (i < e && isspace(p[i]))
        i++;
    while (e > i && isspace(p[e - 1]))
        e--;
    if (i < e && p[i] == '+')
        i++;
    if (i == e)
        return 0;
    long long v = 0;
    for (; i < e; i++) {
        if (!isdigit(p[i]) || (v = v * 10 + (p[i] - '0')) > INT32_MAX)
            return 0;
    }
    *out = (int32_t)v;
    return 1;
}

/* ITER_LABEL shards whose first member (so that the tar reader's buffer is
 * exactly its size, and ASan sees a read past it) is a mutated .cls or
 * .json label: every sample is good with a label in [0, 2^31) or bad
 * naming the shard and key; cJSON never reads past the member. */
#ifndef ITER_LABEL /* (-DITER_LABEL=N: a longer hunt, by hand) */
#define ITER_LABEL 5000
#endif
Test(fuzz_data, mutated_labels_give_a_label_in_range_or_a_bad_sample)
{
    make_images();
    static const char *const seeds_cls[] = {"7", " 12\n", "+3", "2147483647", "0"};
    static const char *const seeds_json[] = {
        "{\"label\": -3}", "{\"label\": 7.5}", "{\"label\": 2147483648}",
        "{\"label\": 4}", "{\"label\":2147483647,\"x\":[1,2,{\"y\":null}]}",
        "{\"a\": \"\\u00e9\\ud83d\\ude00\", \"label\": 1.0e0}", "{\"label\": 5e-0}"};
    static const char *const tokens[] = {"[", "{", "\"", "\\u", "\\ud800", "e999", "-0",
                                         "2147483648", "1e-400", "NaN", "nul", "\0", "}}}}",
                                         ",", ":", "\"label\"", "0x10", " ", "\xff\xfe", "-1",
                                         "-", "1.5", "4294967296", "-2147483648", "\t", "\v"};
    rng_state g;
    rng_seed(&g, FUZZ_SEED, 3, 0);
    int good = 0, bad = 0;
    bytes lab = {0};
    for (int iter = 0; iter < ITER_LABEL; iter++) {
        int json = iter % 2;
        const char *base = json ? seeds_json[rng_below(&g, 7)] : seeds_cls[rng_below(&g, 5)];
        lab.n = 0;
        b_put(&lab, base, strlen(base));
        for (int k = 1 + (int)rng_below(&g, 3); k > 0; k--) {
            size_t at = lab.n ? rng_below(&g, lab.n + 1) : 0;
            switch (rng_below(&g, 5)) {
            case 0:
                if (lab.n)
                    lab.p[rng_below(&g, lab.n)] ^= (unsigned char)(1u << rng_below(&g, 8));
                break;
            case 1: {
                const char *tk = tokens[rng_below(&g, sizeof tokens / sizeof tokens[0])];
                splice_in(&lab, at, (const unsigned char *)tk, *tk ? strlen(tk) : 1);
                break;
            }
            case 2:
                lab.n = at;
                break;
            case 3: /* deep nesting */
                for (int d = (int)rng_below(&g, 1500); d > 0; d--)
                    splice_in(&lab, at, (const unsigned char *)"[", 1);
                break;
            default:
                if (lab.n)
                    lab.p[rng_below(&g, lab.n)] = interesting(&g);
                break;
            }
        }
        shard s;
        memset(&s, 0, sizeof s);
        add_member(&s, json ? "k/x.json" : "k/x.cls", lab.p, lab.n, ST_USTAR);
        add_member(&s, "k/x.jpg", imgs[0].p, imgs[0].n, ST_USTAR);
        b_zero(&s.b, 1024);
        unsigned char *e = exact_copy(s.b.p, s.b.n);
        tar_mem src = {e, s.b.n, 0};
        wds_reader *w = wds_reader_new("labels.tar", tar_mem_read, &src, MAX_MEMBER);
        wds_sample smp;
        char err[1024] = "";
        wds_status st = wds_next(w, &smp, err, sizeof err);
        int32_t want = -1;
        int ok = json ? -1 : ref_cls(lab.p, lab.n, &want);
        if (st == WDS_SAMPLE) {
            cr_assert_geq(smp.label, 0, "iteration %d", iter);
            cr_assert_str_eq(smp.key, "k/x");
            cr_assert(ok != 0, "iteration %d: .cls '%.*s' read as %d", iter, (int)lab.n, lab.p,
                      smp.label);
            if (ok > 0)
                cr_assert_eq(smp.label, want, "iteration %d", iter);
            if (json)
                cr_assert(find_sub(lab.p, lab.n, "label"), "iteration %d", iter);
            good++;
        } else {
            cr_assert(ok <= 0, "iteration %d: .cls '%.*s' (%d) refused: %s", iter, (int)lab.n,
                      lab.p, want, err);
            cr_assert_eq(st, WDS_BAD, "iteration %d: %d %s", iter, st, err);
            cr_assert(starts_with(err, "shard labels.tar: sample 'k/x' at offset 0: "), "%s",
                      err);
            bad++;
        }
        cr_assert_eq(wds_next(w, &smp, err, sizeof err), WDS_END, "%s", err);
        wds_reader_free(w);
        free(e);
        free(s.b.p);
    }
    fprintf(stderr, "labels: %d mutated labels: %d read as a label, %d bad samples\n", ITER_LABEL,
            good, bad);
    cr_assert_gt(good, 0);
    cr_assert_gt(bad, 0);
    free(lab.p);
}
