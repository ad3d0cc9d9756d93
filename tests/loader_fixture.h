/* tests/loader_fixture.h - helpers of the loader tests (tests/test_loader.c,
 * tests/test_loader_index.c): a temporary folder per test, flat SZ x SZ
 * grayscale JPEGs at quality 100 (a flat image decodes to exactly its
 * level, so each sample's level is its id), webdataset shards of such
 * samples written into the folder, and a pattern's index scanned as every
 * rank would. Test code only. */
#ifndef VITJOB_LOADER_FIXTURE_H
#define VITJOB_LOADER_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "loader.h"
#include "tar.h"

#define SZ 16

static char dir[256];

static inline int fwrite_fn(void *ctx, const void *buf, size_t n)
{
    return fwrite(buf, 1, n, ctx) == n ? 0 : -1;
}

/* A flat SZ x SZ grayscale JPEG of level v (quality 100). */
static inline unsigned char *jpeg_of(int v, unsigned long *len)
{
    unsigned char px[SZ * SZ];
    memset(px, v, sizeof px);
    tjhandle h = tjInitCompress();
    unsigned char *out = NULL;
    *len = 0;
    cr_assert_eq(tjCompress2(h, px, SZ, 0, SZ, TJPF_GRAY, &out, len, TJSAMP_GRAY, 100, 0), 0);
    tjDestroy(h);
    return out;
}

typedef struct {
    int id, label; /* id < 0: a corrupt image; label < 0: no label member */
} spec;

/* Writes a shard of the given samples; keys "s<id>". */
static inline void write_shard(const char *name, const spec *s, int n)
{
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    tar_writer *w = tar_writer_new(fwrite_fn, f);
    for (int i = 0; i < n; i++) {
        char key[64], lab[16];
        int id = s[i].id < 0 ? 1000 + i : s[i].id;
        snprintf(key, sizeof key, "s%04d.jpg", id);
        if (s[i].id >= 0) {
            unsigned long len;
            unsigned char *j = jpeg_of(s[i].id, &len);
            cr_assert_eq(tar_writer_add(w, key, j, len, err, sizeof err), 0, "%s", err);
            tjFree(j);
        } else {
            cr_assert_eq(tar_writer_add(w, key, "\xff\xd8\xff\xe0garbage", 12, err, sizeof err), 0);
        }
        if (s[i].label >= 0) {
            snprintf(key, sizeof key, "s%04d.cls", id);
            snprintf(lab, sizeof lab, "%d", s[i].label);
            cr_assert_eq(tar_writer_add(w, key, lab, strlen(lab), err, sizeof err), 0);
        }
    }
    cr_assert_eq(tar_writer_finish(w, err, sizeof err), 0);
    tar_writer_free(w);
    fclose(f);
}

/* nshards shards of per samples each, ids 0.. in order, label id % 10. */
static inline void write_set(int nshards, int per)
{
    for (int k = 0; k < nshards; k++) {
        spec s[256];
        for (int i = 0; i < per; i++) s[i] = (spec){k * per + i, (k * per + i) % 10};
        char name[64];
        snprintf(name, sizeof name, "shard-%d.tar", k);
        write_shard(name, s, per);
    }
}

/* The suite's .init and .fini: a fresh temporary folder `dir`, removed after. */
static inline void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_loader.XXXXXX");
    cr_assert(mkdtemp(dir));
}

static inline void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* The index of `pattern` under dir, scanned as `world` ranks would and their
 * counts added up; NULL with *rc_out and err when any step fails. */
static inline ld_index *index_of(const char *pattern, int world, int num_classes,
                                 int *rc_out, char *err, size_t errlen)
{
    char uri[512];
    snprintf(uri, sizeof uri, "file://%s/%s", dir, pattern);
    ld_index_options io = {.kind = LD_WEBDATASET, .uri = uri, .key = "data.uri",
                           .num_classes = num_classes};
    ld_index *ix = NULL;
    int rc = ld_index_new(&ix, &io, err, errlen);
    if (rc == 0) {
        size_t n = ld_index_units(ix);
        double *counts = calloc(n, sizeof *counts);
        for (int r = 0; r < world && rc == 0; r++) /* every rank's scan, added up */
            rc = ld_index_scan(ix, r, world, 2, counts, err, errlen);
        if (rc == 0) rc = ld_index_set_counts(ix, counts, err, errlen);
        free(counts);
    }
    *rc_out = rc;
    if (rc) {
        ld_index_free(ix);
        return NULL;
    }
    return ix;
}

#endif
