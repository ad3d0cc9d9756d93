/* tests/test_shardwriter.c - worker/data/shardwriter.c (and the encoder it
 * uses, worker/data/encode.c): sizes and shard name patterns are parsed as
 * stated, and the brace pattern printed names exactly the shards written
 * (shards.h expands it); IDX files made here become shards that the
 * project's own webdataset reader (wds.h) reads back sample by sample, with
 * every label, PNG pixels exact and JPEG pixels within a stated bound; the
 * same input and options give byte-identical shards; --samples-per-shard
 * and --shard-bytes cut where stated; the permutation is seeded and
 * --no-shuffle keeps the order; an image folder gives keys, labels in
 * bytewise class order and the files' own bytes, skipping what is no
 * image; and every refusal names the path or pattern. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "decode.h"
#include "encode.h"
#include "exitcode.h"
#include "file.h"
#include "log.h"
#include "rng.h"
#include "shardwriter.h"
#include "shards.h"
#include "wds.h"

TestSuite(shardwriter, .timeout = 120);

/* one log line per shard written is noise here */
__attribute__((constructor)) static void quiet(void) { log_set_level_name("warn"); }

static char dir[256];

static void mk_tmp(void)
{
    snprintf(dir, sizeof dir, "/tmp/vj_sw_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void rm_tmp(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static void write_file(const char *path, const void *data, size_t n)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "mkdir -p \"$(dirname '%s')\"", path);
    cr_assert_eq(system(tmp), 0);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* the pixel (r, c) of image i: smooth shapes, as photographs of garments are */
static uint8_t pixel(int i, int r, int c)
{
    int cx = 8 + i % 12, cy = 6 + (i * 7) % 16;
    int d2 = (r - cy) * (r - cy) + (c - cx) * (c - cx);
    return (uint8_t)(d2 < 60 ? 200 - d2 : (r * 3 + c * 2 + i) % 40);
}

/* <dir>/<sub>/train-{images,labels}-idx*-ubyte with n images of 28x28;
 * label of i: (i * 7) % classes */
static void write_idx(const char *sub, int n, int classes)
{
    char path[512];
    size_t isz = 16 + (size_t)n * 784, lsz = 8 + (size_t)n;
    unsigned char *im = malloc(isz), *lb = malloc(lsz);
    put_be32(im, 0x803);
    put_be32(im + 4, (uint32_t)n);
    put_be32(im + 8, 28);
    put_be32(im + 12, 28);
    for (int i = 0; i < n; i++)
        for (int p = 0; p < 784; p++)
            im[16 + (size_t)i * 784 + (size_t)p] = pixel(i, p / 28, p % 28);
    put_be32(lb, 0x801);
    put_be32(lb + 4, (uint32_t)n);
    for (int i = 0; i < n; i++)
        lb[8 + i] = (unsigned char)((i * 7) % classes);
    snprintf(path, sizeof path, "%s/%s/train-images-idx3-ubyte", dir, sub);
    write_file(path, im, isz);
    snprintf(path, sizeof path, "%s/%s/train-labels-idx1-ubyte", dir, sub);
    write_file(path, lb, lsz);
    free(im);
    free(lb);
}

typedef struct {
    char key[256];
    char ext[8];
    int label;
    unsigned char *image;
    size_t image_size;
    int shard;
} got_sample;

typedef struct {
    got_sample *s;
    size_t n;
    size_t shard_bytes[64];
    long shard_samples[64];
    int shards;
} got_all;

static void got_free(got_all *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->s[i].image);
    free(g->s);
    memset(g, 0, sizeof *g);
}

/* Reads shards name 0.. (pattern under dir) until one is missing, with the
 * project's webdataset reader; every sample must be good. */
static void read_shards(const char *pattern, got_all *g)
{
    memset(g, 0, sizeof *g);
    for (int i = 0;; i++) {
        char name[256], path[600], err[512];
        snprintf(name, sizeof name, pattern, i);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (access(path, F_OK) != 0) break;
        buf b = {0};
        cr_assert_eq(file_read(&b, path, err, sizeof err), 0, "%s", err);
        cr_assert_lt(i, 64);
        g->shard_bytes[i] = b.len;
        g->shards = i + 1;
        tar_mem src = {(const unsigned char *)b.data, b.len, 0};
        wds_reader *w = wds_reader_new(name, tar_mem_read, &src, 1 << 26);
        wds_sample s;
        wds_status st;
        while ((st = wds_next(w, &s, err, sizeof err)) == WDS_SAMPLE) {
            g->s = realloc(g->s, (g->n + 1) * sizeof *g->s);
            got_sample *o = &g->s[g->n++];
            snprintf(o->key, sizeof o->key, "%s", s.key);
            snprintf(o->ext, sizeof o->ext, "%s", s.image_ext);
            o->label = s.label;
            o->image = malloc(s.image_size);
            memcpy(o->image, s.image, s.image_size);
            o->image_size = s.image_size;
            o->shard = i;
            g->shard_samples[i]++;
        }
        cr_assert_eq(st, WDS_END, "%s: %s", name, err);
        wds_reader_free(w);
        buf_free(&b);
    }
}

static shardwriter_options opts(const char *from, const char *out)
{
    static char f[512], o[512];
    snprintf(f, sizeof f, "%s/%s", dir, from);
    snprintf(o, sizeof o, "%s/%s", dir, out);
    return (shardwriter_options){.from = f, .out = o};
}

static long file_size(const char *rel)
{
    char path[600];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* ---- sizes, patterns, the encoder --------------------------------------- */

Test(shardwriter, sizes_take_decimal_and_binary_suffixes_and_refuse_anything_else)
{
    struct {
        const char *s;
        uint64_t v;
    } ok[] = {{"1000000", 1000000}, {"64M", 64000000}, {"1G", 1000000000}, {"512Ki", 524288},
              {"64Mi", 67108864},   {"2k", 2000},      {"2K", 2000},       {"1Ti", 1ull << 40}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 0;
        cr_assert_eq(shardwriter_parse_size(ok[i].s, &v), 0, "%s", ok[i].s);
        cr_assert_eq(v, ok[i].v, "%s: %llu", ok[i].s, (unsigned long long)v);
    }
    const char *bad[] = {"", "0", "-1", "1.5G", "64m", "64 M", "64MB", "Mi", "1e6",
                         "99999999999999999999", "20000000Ti"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        cr_assert_eq(shardwriter_parse_size(bad[i], &v), -1, "'%s' was taken", bad[i]);
    }
}

Test(shardwriter, patterns_name_shards_and_the_brace_pattern_expands_to_those_names)
{
    const char *pats[] = {"s3://b/fmnist/train-%06d.tar", "/data/x-%d.tar", "file:///d/%03d/s.tar",
                          "/d/100%%-%02d.tar"};
    for (size_t k = 0; k < sizeof pats / sizeof pats[0]; k++) {
        shardwriter_pattern p;
        char err[512], braces[6000], name[6000], want[6000];
        cr_assert_eq(shardwriter_pattern_parse(&p, pats[k], err, sizeof err), 0, "%s", err);
        for (long n = 1; n <= 13; n += 12) {
            cr_assert_eq(shardwriter_pattern_braces(&p, n, braces, sizeof braces), 0);
            shards_list *l = shards_new(braces, 1000, err, sizeof err);
            cr_assert_not_null(l, "%s: %s", braces, err);
            cr_assert_eq(shards_count(l), (size_t)n, "%s", braces);
            for (long i = 0; i < n; i++) {
                cr_assert_eq(shardwriter_pattern_name(&p, i, name, sizeof name), 0);
                /* what printf makes of the pattern */
                snprintf(want, sizeof want, pats[k], (int)i);
                cr_assert_str_eq(name, want);
                cr_assert_str_eq(shards_at(l, (size_t)i), name, "%s", braces);
            }
            shards_free(l);
        }
    }
    shardwriter_pattern p;
    char err[512], name[64];
    shardwriter_pattern_parse(&p, "s-%02d.tar", err, sizeof err);
    cr_assert_eq(shardwriter_pattern_name(&p, 99, name, sizeof name), 0);
    cr_assert_eq(shardwriter_pattern_name(&p, 100, name, sizeof name), -1,
                 "shard 100 of %%02d must be refused: {00..100} would name 000..100");
}

Test(shardwriter, patterns_without_one_number_or_with_braces_are_refused_naming_them)
{
    struct {
        const char *pat, *says;
    } bad[] = {{"/out/train.tar", "no shard number"},
               {"/out/%06d-%06d.tar", "more than one"},
               {"/out/%6d.tar", "%0Nd"},
               {"/out/%s.tar", "%0Nd"},
               {"/out/%019d.tar", "%0Nd"},
               {"/out/{a,b}-%d.tar", "'{'"},
               {"s3://b-%03d/x.tar", "in the key"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        shardwriter_pattern p;
        char err[512] = "";
        cr_assert_eq(shardwriter_pattern_parse(&p, bad[i].pat, err, sizeof err), -1, "%s",
                     bad[i].pat);
        cr_assert(strstr(err, bad[i].pat) && strstr(err, bad[i].says), "%s", err);
    }
}

Test(shardwriter, the_encoder_is_deterministic_png_exact_and_jpeg_within_bound)
{
    uint8_t px[28 * 28];
    for (int i = 0; i < 20; i++) {
        for (int p = 0; p < 784; p++)
            px[p] = pixel(i, p / 28, p % 28);
        for (int f = 0; f < 2; f++) {
            unsigned char *a, *b;
            size_t na, nb;
            char err[512];
            cr_assert_eq(encode_image((encode_format)f, px, 28, 28, 1, 95, "x", &a, &na, err,
                                      sizeof err), 0, "%s", err);
            cr_assert_eq(encode_image((encode_format)f, px, 28, 28, 1, 95, "x", &b, &nb, err,
                                      sizeof err), 0, "%s", err);
            cr_assert(na == nb && memcmp(a, b, na) == 0, "two encodings differ");
            decode_image im;
            cr_assert_eq(decode_image_rgb(a, na, "x", NULL, &im, err, sizeof err), 0, "%s", err);
            cr_assert_eq(im.format, f == ENCODE_PNG ? DECODE_PNG : DECODE_JPEG);
            cr_assert(im.width == 28 && im.height == 28);
            int maxd = 0;
            for (int p = 0; p < 784; p++) {
                cr_assert(im.rgb[3 * p] == im.rgb[3 * p + 1] && im.rgb[3 * p] == im.rgb[3 * p + 2]);
                int d = abs((int)im.rgb[3 * p] - (int)px[p]);
                maxd = d > maxd ? d : maxd;
            }
            /* PNG exact; q95 grayscale JPEG: every pixel within 16 */
            cr_assert_leq(maxd, f == ENCODE_PNG ? 0 : 16, "image %d format %d: off by %d", i, f,
                          maxd);
            decode_image_free(&im);
            free(a);
            free(b);
        }
    }
    unsigned char *o;
    size_t n;
    char err[512];
    cr_assert_eq(encode_image(ENCODE_JPEG, px, 28, 28, 1, 0, "k9", &o, &n, err, sizeof err), -1);
    cr_assert(strstr(err, "k9: JPEG quality 0"), "%s", err);
    cr_assert_null(o);
}

/* ---- IDX sources -------------------------------------------------------- */

Test(shardwriter, idx_becomes_shards_whose_samples_carry_every_image_and_label, .init = mk_tmp,
     .fini = rm_tmp)
{
    write_idx("fm", 250, 10);
    for (int f = 0; f < 2; f++) {
        shardwriter_options o = opts("fm", f ? "png/s-%04d.tar" : "jpg/s-%04d.tar");
        o.format = f ? ENCODE_PNG : ENCODE_JPEG;
        o.samples_per_shard = 100;
        char *rep = NULL;
        size_t replen = 0;
        o.report = open_memstream(&rep, &replen);
        shardwriter_result r;
        char err[1024] = "";
        cr_assert_eq(shardwriter_run(&o, &r, err, sizeof err), VJ_OK, "%s", err);
        fclose(o.report);
        cr_assert_eq(r.shards, 3);
        cr_assert_eq(r.samples, 250);
        cr_assert_eq(r.classes, 10);
        got_all g;
        read_shards(f ? "png/s-%04d.tar" : "jpg/s-%04d.tar", &g);
        cr_assert_eq(g.shards, 3);
        cr_assert(g.shard_samples[0] == 100 && g.shard_samples[1] == 100 &&
                  g.shard_samples[2] == 50);
        cr_assert_eq(g.n, 250);
        cr_assert_eq(r.bytes, g.shard_bytes[0] + g.shard_bytes[1] + g.shard_bytes[2]);
        char seen[250] = {0};
        for (size_t j = 0; j < g.n; j++) {
            const got_sample *s = &g.s[j];
            int i = atoi(s->key);
            char key[16];
            snprintf(key, sizeof key, "%06d", i);
            cr_assert_str_eq(s->key, key);
            cr_assert(i >= 0 && i < 250 && !seen[i], "%s twice", s->key);
            seen[i] = 1;
            cr_assert_str_eq(s->ext, f ? "png" : "jpg");
            cr_assert_eq(s->label, (i * 7) % 10, "%s", s->key);
            decode_image im;
            cr_assert_eq(decode_image_rgb(s->image, s->image_size, s->key, NULL, &im, err,
                                          sizeof err), 0, "%s", err);
            int maxd = 0;
            for (int p = 0; p < 784; p++) {
                int d = abs((int)im.rgb[3 * p] - (int)pixel(i, p / 28, p % 28));
                maxd = d > maxd ? d : maxd;
            }
            cr_assert_leq(maxd, f ? 0 : 16, "%s: off by %d", s->key, maxd);
            decode_image_free(&im);
        }
        char want[1024];
        snprintf(want, sizeof want, "data.uri: %s/%s/s-{0000..0002}.tar\nmodel.numClasses: 10\n",
                 dir, f ? "png" : "jpg");
        cr_assert(strstr(rep, want), "%s", rep);
        snprintf(want, sizeof want, "wrote %s/%s/s-0002.tar: 50 samples, %zu bytes\n", dir,
                 f ? "png" : "jpg", g.shard_bytes[2]);
        cr_assert(strstr(rep, want), "%s", rep);
        cr_assert(strstr(rep, "total: 3 shards, 250 samples"), "%s", rep);
        free(rep);
        got_free(&g);
    }
}

Test(shardwriter, the_same_input_and_options_give_byte_identical_shards, .init = mk_tmp,
     .fini = rm_tmp)
{
    write_idx("fm", 120, 10);
    for (int f = 0; f < 2; f++) {
        const char *outs[] = {"a/s-%02d.tar", "b/s-%02d.tar"};
        for (int k = 0; k < 2; k++) {
            shardwriter_options o = opts("fm", outs[k]);
            o.format = f ? ENCODE_PNG : ENCODE_JPEG;
            o.samples_per_shard = 50;
            o.seed = 7;
            char err[1024];
            cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_OK, "%s", err);
        }
        for (int i = 0; i < 3; i++) {
            char a[600], b[600], err[512];
            snprintf(a, sizeof a, "%s/a/s-%02d.tar", dir, i);
            snprintf(b, sizeof b, "%s/b/s-%02d.tar", dir, i);
            buf x = {0}, y = {0};
            cr_assert_eq(file_read(&x, a, err, sizeof err), 0, "%s", err);
            cr_assert_eq(file_read(&y, b, err, sizeof err), 0, "%s", err);
            cr_assert(x.len == y.len && memcmp(x.data, y.data, x.len) == 0,
                      "format %d: %s and %s differ", f, a, b);
            buf_free(&x);
            buf_free(&y);
        }
    }
}

Test(shardwriter, shard_bytes_closes_a_shard_before_the_sample_that_would_overflow_it,
     .init = mk_tmp, .fini = rm_tmp)
{
    write_idx("fm", 300, 10);
    /* each sample: 2 headers + 512 of .cls + its image padded: ~2.5 KiB */
    const uint64_t limit = 64 * 1024;
    shardwriter_options o = opts("fm", "s-%03d.tar");
    o.format = ENCODE_PNG;
    o.shard_bytes = limit;
    shardwriter_result r;
    char err[1024];
    cr_assert_eq(shardwriter_run(&o, &r, err, sizeof err), VJ_OK, "%s", err);
    got_all g;
    read_shards("s-%03d.tar", &g);
    cr_assert_eq(g.n, 300);
    cr_assert_gt(g.shards, 5);
    cr_assert_eq(r.shards, g.shards);
    for (int i = 0; i < g.shards; i++) {
        cr_assert_leq(g.shard_bytes[i], limit, "shard %d: %zu bytes", i, g.shard_bytes[i]);
        if (i + 1 == g.shards) break;
        /* the next shard's first sample would not have fitted */
        size_t first = 0;
        for (size_t j = 0; j < g.n; j++)
            if (g.s[j].shard == i + 1) {
                first = j;
                break;
            }
        size_t sample = 512 + 512 + 512 + (g.s[first].image_size + 511) / 512 * 512;
        cr_assert_gt(g.shard_bytes[i] + sample, limit, "shard %d closed early", i);
    }
    got_free(&g);

    /* a limit below one sample: each goes alone; with samples_per_shard too,
     * the count also cuts */
    o = opts("fm", "one/s-%03d.tar");
    o.shard_bytes = 1000;
    o.samples_per_shard = 2;
    cr_assert_eq(shardwriter_run(&o, &r, err, sizeof err), VJ_OK, "%s", err);
    cr_assert_eq(r.shards, 300);
    o = opts("fm", "two/s-%03d.tar");
    o.shard_bytes = 1ull << 30;
    o.samples_per_shard = 120;
    cr_assert_eq(shardwriter_run(&o, &r, err, sizeof err), VJ_OK, "%s", err);
    cr_assert_eq(r.shards, 3);
}

Test(shardwriter, the_permutation_is_seeded_and_no_shuffle_keeps_index_order, .init = mk_tmp,
     .fini = rm_tmp)
{
    write_idx("fm", 200, 10);
    const char *outs[] = {"s0/x-%d.tar", "s0b/x-%d.tar", "s1/x-%d.tar", "ns/x-%d.tar"};
    for (int k = 0; k < 4; k++) {
        shardwriter_options o = opts("fm", outs[k]);
        o.format = ENCODE_PNG;
        o.seed = k == 2 ? 1 : 0;
        o.no_shuffle = k == 3;
        char err[1024];
        cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_OK, "%s", err);
    }
    got_all g[4];
    for (int k = 0; k < 4; k++)
        read_shards(outs[k], &g[k]);
    int same01 = 1, same02 = 1, in_order0 = 1;
    for (size_t j = 0; j < 200; j++) {
        same01 &= strcmp(g[0].s[j].key, g[1].s[j].key) == 0;
        same02 &= strcmp(g[0].s[j].key, g[2].s[j].key) == 0;
        in_order0 &= atoi(g[0].s[j].key) == (int)j;
        cr_assert_eq(atoi(g[3].s[j].key), (int)j, "--no-shuffle: position %zu", j);
    }
    cr_assert(same01, "the same seed gave two orders");
    cr_assert(!same02, "seeds 0 and 1 gave one order");
    cr_assert(!in_order0, "seed 0 did not shuffle");
    /* the order is the Fisher-Yates of rng.h's stream (seed, SHARDWRITER_STREAM, n) */
    size_t perm[200];
    for (size_t i = 0; i < 200; i++)
        perm[i] = i;
    rng_state r;
    rng_seed(&r, 1, SHARDWRITER_STREAM, 200);
    for (size_t i = 199; i > 0; i--) {
        size_t j = (size_t)rng_below(&r, i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t j = 0; j < 200; j++)
        cr_assert_eq(atoi(g[2].s[j].key), (int)perm[j]);
    for (int k = 0; k < 4; k++)
        got_free(&g[k]);
}

/* ---- image folders ------------------------------------------------------ */

/* a small gray JPEG or PNG (encode.h) whose size and pixels depend on tag:
 * every file its own bytes, and each one decodes (the writer checks) */
static void fake_image(const char *rel, int png, int tag)
{
    char path[600];
    int w = 5 + tag % 7, h = 4 + tag % 5;
    uint8_t px[16 * 16];
    for (int i = 0; i < w * h; i++) px[i] = (uint8_t)(i * 31 + tag * 17);
    unsigned char *enc = NULL;
    size_t n = 0;
    char err[256] = "";
    cr_assert_eq(encode_image(png ? ENCODE_PNG : ENCODE_JPEG, px, w, h, 1, 90, rel, &enc, &n, err,
                              sizeof err),
                 0, "%s", err);
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    write_file(path, enc, n);
    free(enc);
}

static const got_sample *find_key(const got_all *g, const char *key)
{
    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->s[i].key, key) == 0) return &g->s[i];
    return NULL;
}

Test(shardwriter, an_image_folder_gives_keys_sorted_class_labels_and_the_files_own_bytes,
     .init = mk_tmp, .fini = rm_tmp)
{
    struct {
        const char *rel;
        int png, cls;
        const char *key, *ext;
    } files[] = {
        {"img/dog/a.jpg", 0, 2, "dog/a", "jpg"},
        {"img/dog/deep/er/b.PNG", 1, 2, "dog/deep/er/b", "png"},
        {"img/Zebra/z.JPEG", 0, 0, "Zebra/z", "jpeg"},
        {"img/cat/c.v2.final.jpg", 0, 1, "cat/c_v2_final", "jpg"},
        {"img/cat/sub.dir/d.png", 1, 1, "cat/sub.dir/d", "png"},
        {"img/cat/.e.jpg", 0, 1, "cat/_e", "jpg"},
    };
    size_t nf = sizeof files / sizeof files[0];
    for (size_t i = 0; i < nf; i++)
        fake_image(files[i].rel, files[i].png, (int)i);
    /* skipped: not images by name; beside the class folders; image names
     * whose bytes are neither JPEG nor PNG */
    char path[600];
    snprintf(path, sizeof path, "%s/img/cat/notes.txt", dir);
    write_file(path, "hello", 5);
    snprintf(path, sizeof path, "%s/img/dog/.jpg", dir);
    write_file(path, "\xff\xd8\xff", 3);
    snprintf(path, sizeof path, "%s/img/README.jpg", dir);
    write_file(path, "\xff\xd8\xff", 3);
    snprintf(path, sizeof path, "%s/img/dog/fake.jpg", dir);
    write_file(path, "GIF89a", 6);

    shardwriter_options o = opts("img", "out/s-%d.tar");
    o.samples_per_shard = 4;
    char *rep = NULL;
    size_t replen = 0;
    o.report = open_memstream(&rep, &replen);
    shardwriter_result r;
    char err[1024] = "";
    cr_assert_eq(shardwriter_run(&o, &r, err, sizeof err), VJ_OK, "%s", err);
    fclose(o.report);
    cr_assert_eq(r.samples, (long)nf);
    cr_assert_eq(r.shards, 2);
    cr_assert_eq(r.classes, 3);
    cr_assert_eq(r.skipped, 4, "skipped %ld", r.skipped);
    cr_assert(strstr(rep, "model.numClasses: 3\nclasses:\n  0: Zebra\n  1: cat\n  2: dog\n"),
              "%s", rep);
    cr_assert(strstr(rep, "; 4 files skipped"), "%s", rep);
    got_all g;
    read_shards("out/s-%d.tar", &g);
    cr_assert_eq(g.n, nf);
    for (size_t i = 0; i < nf; i++) {
        const got_sample *s = find_key(&g, files[i].key);
        cr_assert_not_null(s, "no sample %s", files[i].key);
        cr_assert_str_eq(s->ext, files[i].ext);
        cr_assert_eq(s->label, files[i].cls, "%s", s->key);
        buf b = {0};
        snprintf(path, sizeof path, "%s/%s", dir, files[i].rel);
        cr_assert_eq(file_read(&b, path, err, sizeof err), 0);
        cr_assert(b.len == s->image_size && memcmp(b.data, s->image, b.len) == 0,
                  "%s: not the file's bytes", s->key);
        buf_free(&b);
    }
    got_free(&g);

    /* --no-shuffle: class by class, bytewise by the path under the class */
    o = opts("img", "ord/s-%d.tar");
    o.no_shuffle = 1;
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_OK, "%s", err);
    read_shards("ord/s-%d.tar", &g);
    const char *order[] = {"Zebra/z", "cat/_e", "cat/c_v2_final", "cat/sub.dir/d", "dog/a",
                           "dog/deep/er/b"};
    for (size_t i = 0; i < nf; i++)
        cr_assert_str_eq(g.s[i].key, order[i]);
    got_free(&g);
    free(rep);
}

Test(shardwriter, the_folder_refuses_two_files_of_one_key_and_classes_without_images,
     .init = mk_tmp, .fini = rm_tmp)
{
    char err[1024] = "";
    fake_image("dup/a/x.jpg", 0, 1);
    fake_image("dup/a/x.png", 1, 2);
    shardwriter_options o = opts("dup", "o/s-%d.tar");
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "a/x.jpg and a/x.png") && strstr(err, "\"a/x\""), "%s", err);
    cr_assert_eq(file_size("o/s-0.tar"), -1, "a shard was written before the refusal");

    fake_image("dots/a/y.z.jpg", 0, 1);
    fake_image("dots/a/y_z.jpg", 0, 2);
    o = opts("dots", "o/s-%d.tar");
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "a/y.z.jpg and a/y_z.jpg"), "%s", err);

    fake_image("hole/a/y.jpg", 0, 1);
    char path[600];
    snprintf(path, sizeof path, "%s/hole/b/readme.txt", dir);
    write_file(path, "x", 1);
    o = opts("hole", "o/s-%d.tar");
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "hole/b: a class folder with no .jpg, .jpeg or .png files"), "%s", err);

    /* images by name only: nothing to write */
    snprintf(path, sizeof path, "%s/nojpeg/a/y.jpg", dir);
    write_file(path, "not a jpeg", 10);
    o = opts("nojpeg", "o/s-%d.tar");
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "empty data set") && strstr(err, "nojpeg"), "%s", err);

    /* a symbolic link loop */
    fake_image("loop/a/y.jpg", 0, 1);
    snprintf(path, sizeof path, "%s/loop/a/again", dir);
    cr_assert_eq(symlink("..", path), 0);
    o = opts("loop", "o/s-%d.tar");
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "again") && strstr(err, "loop"), "%s", err);
}

/* ---- a brace pattern for --out ------------------------------------------ */

Test(shardwriter, a_brace_pattern_out_writes_exactly_its_shards_evenly_and_prints_it_absolute,
     .init = mk_tmp, .fini = rm_tmp)
{
    char err[1024] = "", *rep = NULL, want[1200];
    size_t replen = 0;
    write_idx("fm", 23, 10);
    /* 23 samples into the 5 names of {03..07}: 4 or 5 each, named as
     * data.uri's reader expands the pattern */
    shardwriter_options o = opts("fm", "b/s-{03..07}.tar");
    o.report = open_memstream(&rep, &replen);
    shardwriter_result r;
    cr_assert_eq(shardwriter_run(&o, &r, err, sizeof err), 0, "%s", err);
    fclose(o.report);
    cr_assert_eq(r.shards, 5);
    cr_assert_eq(r.samples, 23);
    got_all g;
    read_shards("b/s-%02d.tar", &g);
    cr_assert_eq(g.shards, 0, "nothing below the range's first name");
    got_free(&g);
    long total = 0;
    for (int i = 3; i <= 7; i++) {
        char name[64];
        snprintf(name, sizeof name, "b/s-%02d.tar", i);
        cr_assert_gt(file_size(name), 0, "%s", name);
    }
    /* the shards in order, by the reader: sizes 4 or 5, every sample once */
    char pat[600];
    snprintf(pat, sizeof pat, "%s/b/s-{03..07}.tar", dir);
    shards_list *l = shards_new(pat, 100, err, sizeof err);
    cr_assert_not_null(l, "%s", err);
    for (size_t i = 0; i < shards_count(l); i++) {
        buf b = {0};
        cr_assert_eq(file_read(&b, shards_at(l, i), err, sizeof err), 0, "%s", err);
        tar_mem src = {(const unsigned char *)b.data, b.len, 0};
        wds_reader *w = wds_reader_new(shards_at(l, i), tar_mem_read, &src, 1 << 26);
        wds_sample smp;
        long n = 0;
        while (wds_next(w, &smp, err, sizeof err) == WDS_SAMPLE)
            n++;
        cr_assert(n == 4 || n == 5, "%s: %ld samples", shards_at(l, i), n);
        total += n;
        wds_reader_free(w);
        buf_free(&b);
    }
    shards_free(l);
    cr_assert_eq(total, 23);
    snprintf(want, sizeof want, "data.format: webdataset\ndata.uri: %s\nmodel.numClasses: 10\n",
             pat);
    cr_assert(strstr(rep, want), "%s", rep);
    free(rep);

    /* a relative pattern is printed joined to the working directory */
    char cwd[512];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    cr_assert_eq(chdir(dir), 0);
    rep = NULL;
    o = (shardwriter_options){.from = "fm", .out = "./rel/t-{0..1}.tar"};
    o.report = open_memstream(&rep, &replen);
    int rc = shardwriter_run(&o, &r, err, sizeof err);
    fclose(o.report);
    cr_assert_eq(chdir(cwd), 0);
    cr_assert_eq(rc, 0, "%s", err);
    snprintf(want, sizeof want, "data.uri: %s/rel/t-{0..1}.tar\n", dir);
    cr_assert(strstr(rep, want), "%s", rep);
    cr_assert_eq(file_size("rel/t-1.tar") > 0, 1);
    free(rep);
}

Test(shardwriter, a_brace_pattern_out_refuses_sizes_beside_it_more_shards_than_samples_and_printf,
     .init = mk_tmp, .fini = rm_tmp)
{
    char err[1024] = "";
    write_idx("fm", 3, 10);
    struct {
        const char *out;
        long per;
        const char *says;
    } bad[] = {{"o/s-{0..1}.tar", 2, "--samples-per-shard"},
               {"o/s-{0..3}.tar", 0, "names 4 shards but"},
               {"o/s-{0..1}-%d.tar", 0, "no %d beside it"},
               {"o/s-{a,a}.tar", 0, "twice"},
               {"o/s-{0..1.tar", 0, "o/s-{0..1.tar"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        shardwriter_options o = opts("fm", bad[i].out);
        o.samples_per_shard = bad[i].per;
        cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_USAGE, "%s", bad[i].out);
        cr_assert(strstr(err, bad[i].says), "%s: %s", bad[i].out, err);
        cr_assert_eq(file_size("o/s-0.tar"), -1, "%s wrote a shard", bad[i].out);
    }
    shardwriter_options o = opts("fm", "o/s-{0..1}.tar");
    o.shard_bytes = 1 << 20;
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_USAGE);
    cr_assert(strstr(err, "--shard-bytes"), "%s", err);
}

/* ---- refusals ----------------------------------------------------------- */

Test(shardwriter, refusals_name_the_source_the_pattern_or_the_output, .init = mk_tmp,
     .fini = rm_tmp)
{
    char err[1024] = "", path[600];
    shardwriter_options o = opts("nowhere", "o/s-%d.tar");
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "nowhere") && strstr(err, "No such file"), "%s", err);

    snprintf(path, sizeof path, "%s/empty", dir);
    mkdir(path, 0755);
    o = opts("empty", "o/s-%d.tar");
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, path) && strstr(err, "empty data set"), "%s", err);

    snprintf(path, sizeof path, "%s/afile", dir);
    write_file(path, "x", 1);
    o = opts("afile", "o/s-%d.tar");
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, path) && strstr(err, "not a directory"), "%s", err);

    write_idx("fm", 10, 10);
    o = opts("fm", "o/s.tar");
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_USAGE);
    cr_assert(strstr(err, "o/s.tar") && strstr(err, "no shard number"), "%s", err);

    /* the output's directory is a file */
    o = opts("fm", "afile/s-%d.tar");
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_OUTPUT);
    cr_assert(strstr(err, "afile"), "%s", err);

    /* the split's files missing: dataset_load_idx names the file */
    o = opts("fm", "o/s-%d.tar");
    o.split = "t10k";
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "t10k-images-idx3-ubyte"), "%s", err);

    /* IDX options for an image folder */
    fake_image("img/a/x.jpg", 0, 1);
    o = opts("img", "o/s-%d.tar");
    o.format = ENCODE_PNG;
    o.idx_options_given = 1;
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_USAGE);
    cr_assert(strstr(err, "image folder") && strstr(err, "--format"), "%s", err);

    /* more shards than the width has digits for */
    write_idx("fm11", 11, 10);
    o = opts("fm11", "w/s-%01d.tar");
    o.samples_per_shard = 1;
    cr_assert_eq(shardwriter_run(&o, NULL, err, sizeof err), VJ_ERR_OUTPUT);
    cr_assert(strstr(err, "shard 10") && strstr(err, "digits"), "%s", err);
}
