/* tests/test_loader.c - worker/data/loader.c: shards split over ranks,
 * shuffled, decoded on threads, resumed to the sample, bad samples skipped
 * and counted, the evaluation pass, an image folder's labels through the
 * loader. (The index, its scan and the data sets it refuses:
 * tests/test_loader_index.c.)
 *
 * The shards are made here (tests/loader_fixture.h): flat 16x16 grayscale
 * JPEGs at quality 100 (a flat image decodes to exactly its level), so each
 * sample's level is its id and a batch says which samples it holds. */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <turbojpeg.h>

#include "exitcode.h"
#include "loader.h"
#include "loader_fixture.h"
#include "tar.h"

TestSuite(loader, .init = setup, .fini = teardown, .timeout = 120);

static const float ZERO[1] = {0.0f}, ONE[1] = {1.0f};

static ld_options opts_of(const ld_index *ix, int rank, int world, int batch, int workers,
                          int shuffle)
{
    ld_options o = {.ix = ix, .rank = rank, .world = world, .seed = 7, .train = 1,
                    .batch = batch, .per_step = batch, .workers = workers,
                    .prefetch_batches = 2, .shuffle_buffer = shuffle, .crop_pct = 1.0,
                    .max_bad_fraction = 0.0};
    o.xf = (xf_params){.out_size = SZ, .channels = 1, .interp = XF_BILINEAR, .mean = ZERO,
                       .std = ONE};
    o.scale[0] = 0.08;
    o.scale[1] = 1;
    o.ratio[0] = 0.75;
    o.ratio[1] = 4.0 / 3.0;
    return o;
}

/* The ids of the next batch (each image's level). */
static int next_ids(ld_loader *l, int batch, int *ids, int *labels)
{
    float *img = malloc(sizeof(float) * (size_t)batch * SZ * SZ);
    char err[1024] = "";
    int n = 0;
    int rc = ld_next(l, img, labels, &n, err, sizeof err);
    cr_assert_eq(rc, 0, "ld_next: %s", err);
    for (int b = 0; b < n; b++) {
        float v = img[(size_t)b * SZ * SZ + 37] * 255.0f;
        ids[b] = (int)lrintf(v);
        cr_assert_float_eq(v, (float)ids[b], 0.01, "sample %d: level %f is not flat", b, v);
    }
    free(img);
    return n;
}

Test(loader, two_ranks_read_disjoint_shards_and_together_every_sample_once_per_epoch)
{
    write_set(4, 10);
    char err[1024];
    int rc;
    ld_index *ix = index_of("shard-{0..3}.tar", 2, 10, &rc, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(ld_index_samples(ix), 40);
    for (int epoch = 0; epoch < 2; epoch++) {
        int seen[40] = {0};
        for (int r = 0; r < 2; r++) {
            ld_options o = opts_of(ix, r, 2, 4, 2, 3);
            ld_loader *l;
            cr_assert_eq(ld_new(&l, &o, err, sizeof err), 0);
            cr_assert_eq(ld_epoch_steps(l, epoch), 5); /* 20 samples a rank, 4 a step */
            ld_position p = {.epoch = epoch, .unit = 0};
            cr_assert_eq(ld_start(l, &p, 1, err, sizeof err), 0, "%s", err);
            int shard_of_rank[4] = {0};
            for (int s = 0; s < 5; s++) {
                int ids[4], labels[4];
                cr_assert_eq(next_ids(l, 4, ids, labels), 4);
                for (int b = 0; b < 4; b++) {
                    cr_assert(ids[b] >= 0 && ids[b] < 40);
                    cr_assert_eq(labels[b], ids[b] % 10);
                    seen[ids[b]]++;
                    shard_of_rank[ids[b] / 10] = 1;
                }
                ld_step_done(l);
            }
            int shards = 0;
            for (int k = 0; k < 4; k++) shards += shard_of_rank[k];
            cr_assert_eq(shards, 2, "rank %d read from %d shards, not its 2", r, shards);
            ld_free(l);
        }
        for (int i = 0; i < 40; i++)
            cr_assert_eq(seen[i], 1, "epoch %d: sample %d read %d times", epoch, i, seen[i]);
    }
    ld_index_free(ix);
}

/* The ids of `steps` steps from a loader started at p (NULL: the start). */
static void read_steps(const ld_index *ix, const ld_position *p, int skip_steps, int steps,
                       int workers, int *out, ld_position *after_skip)
{
    char err[1024];
    ld_options o = opts_of(ix, 0, 1, 4, workers, 3);
    ld_loader *l;
    cr_assert_eq(ld_new(&l, &o, err, sizeof err), 0);
    cr_assert_eq(ld_start(l, p, 1, err, sizeof err), 0, "%s", err);
    int labels[4];
    for (int s = 0; s < skip_steps; s++) {
        int ids[4];
        cr_assert_eq(next_ids(l, 4, ids, labels), 4);
        ld_step_done(l);
    }
    if (after_skip) *after_skip = ld_position_now(l);
    for (int s = 0; s < steps; s++) {
        cr_assert_eq(next_ids(l, 4, out + 4 * s, labels), 4);
        ld_step_done(l);
    }
    ld_free(l);
}

Test(loader, a_resumed_loader_takes_exactly_the_samples_of_the_uninterrupted_one)
{
    write_set(3, 7); /* 21 samples: 5 steps of 4 an epoch, blocks of 3 cut mid-shard */
    char err[1024];
    int rc;
    ld_index *ix = index_of("shard-{0..2}.tar", 1, 10, &rc, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    int whole[4 * 14];
    read_steps(ix, NULL, 0, 14, 2, whole, NULL); /* nearly 3 epochs */
    for (int cut = 1; cut < 13; cut += 2) {
        ld_position p;
        int head[4 * 14];
        read_steps(ix, NULL, cut, 0, 3, head, &p);
        cr_assert(p.unit >= 0, "cut %d: the position is exact", cut);
        int rest[4 * 14];
        read_steps(ix, &p, 0, 14 - cut, 1, rest, NULL);
        for (int i = 0; i < 4 * (14 - cut); i++)
            cr_assert_eq(rest[i], whole[4 * cut + i], "cut after step %d: sample %d is %d, "
                         "not %d", cut, i, rest[i], whole[4 * cut + i]);
    }
    ld_index_free(ix);
}

Test(loader, batches_do_not_depend_on_the_number_of_decode_threads_and_augmentation_is_seeded)
{
    write_set(2, 12);
    char err[1024];
    int rc;
    ld_index *ix = index_of("shard-{0..1}.tar", 1, 10, &rc, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    float *a = malloc(sizeof(float) * 4 * SZ * SZ), *b = malloc(sizeof(float) * 4 * SZ * SZ);
    ld_loader *la, *lb;
    ld_options oa = opts_of(ix, 0, 1, 4, 1, 5), ob = opts_of(ix, 0, 1, 4, 4, 5);
    oa.augment = ob.augment = 1;
    cr_assert_eq(ld_new(&la, &oa, err, sizeof err), 0);
    cr_assert_eq(ld_new(&lb, &ob, err, sizeof err), 0);
    cr_assert_eq(ld_start(la, NULL, 1, err, sizeof err), 0);
    cr_assert_eq(ld_start(lb, NULL, 1, err, sizeof err), 0);
    for (int s = 0; s < 6; s++) {
        int la_lab[4], lb_lab[4], na, nb;
        cr_assert_eq(ld_next(la, a, la_lab, &na, err, sizeof err), 0, "%s", err);
        cr_assert_eq(ld_next(lb, b, lb_lab, &nb, err, sizeof err), 0, "%s", err);
        cr_assert_eq(memcmp(a, b, sizeof(float) * 4 * SZ * SZ), 0, "step %d differs", s);
        cr_assert_eq(memcmp(la_lab, lb_lab, sizeof la_lab), 0);
        ld_step_done(la);
        ld_step_done(lb);
    }
    ld_free(la);
    ld_free(lb);
    free(a);
    free(b);
    ld_index_free(ix);
}

Test(loader, bad_samples_are_skipped_and_counted)
{
    spec s[10];
    for (int i = 0; i < 10; i++) s[i] = (spec){i, i % 10};
    s[3].id = -1;    /* a corrupt JPEG */
    s[6].label = -1; /* no label */
    write_shard("bad-0.tar", s, 10);
    char err[1024];
    int rc;
    ld_index *ix = index_of("bad-0.tar", 1, 10, &rc, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    ld_options o = opts_of(ix, 0, 1, 4, 2, 1);
    o.max_bad_fraction = 0.2;
    ld_loader *l;
    cr_assert_eq(ld_new(&l, &o, err, sizeof err), 0);
    cr_assert_eq(ld_epoch_steps(l, 0), 2); /* floor(10 x 0.8) = 8 samples */
    cr_assert_eq(ld_start(l, NULL, 1, err, sizeof err), 0);
    for (int st = 0; st < 2; st++) {
        int ids[4], labels[4];
        cr_assert_eq(next_ids(l, 4, ids, labels), 4);
        for (int b = 0; b < 4; b++) cr_assert(ids[b] != 3 && ids[b] != 6);
        ld_step_done(l);
    }
    cr_assert_eq(ld_stats_now(l).skipped, 2);
    ld_free(l);
    ld_index_free(ix);
}

/* The bad-sample reserve rounds the usable samples down: 10 a rank less 5%
 * is 9.5, so 9 usable, one step of 5 (rounded up, 10 would make it two and
 * the last step would wait for a sample the reserve gave away). */
Test(loader, the_usable_sample_count_after_the_bad_sample_reserve_is_rounded_down_at_1_and_2_ranks)
{
    write_set(2, 10);
    char err[1024];
    int rc;
    for (int world = 1; world <= 2; world++) {
        ld_index *ix = index_of(world == 1 ? "shard-0.tar" : "shard-{0..1}.tar", world, 10,
                                &rc, err, sizeof err);
        cr_assert_eq(rc, 0, "%s", err);
        for (int r = 0; r < world; r++) {
            ld_options o = opts_of(ix, r, world, 5, 1, 1);
            o.max_bad_fraction = 0.05;
            ld_loader *l;
            cr_assert_eq(ld_new(&l, &o, err, sizeof err), 0, "%s", err);
            cr_assert_eq(ld_epoch_steps(l, 0), 1, "world %d rank %d: floor(10 x 0.95) = 9 "
                         "samples, one step of 5", world, r);
            ld_free(l);
        }
        ld_index_free(ix);
    }
}

Test(loader, more_bad_samples_than_max_bad_fraction_fail_naming_the_worst_shard)
{
    spec good[10], bad[10];
    for (int i = 0; i < 10; i++) {
        good[i] = (spec){i, 1};
        bad[i] = (spec){i < 4 ? -1 : 10 + i, 1};
    }
    write_shard("mix-0.tar", good, 10);
    write_shard("mix-1.tar", bad, 10);
    char err[1024];
    int rc;
    ld_index *ix = index_of("mix-{0..1}.tar", 1, 10, &rc, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    ld_options o = opts_of(ix, 0, 1, 4, 2, 1);
    o.max_bad_fraction = 0.1; /* 2 of 20 allowed; 4 are bad */
    ld_loader *l;
    cr_assert_eq(ld_new(&l, &o, err, sizeof err), 0);
    cr_assert_eq(ld_start(l, NULL, 1, err, sizeof err), 0);
    float img[4 * SZ * SZ];
    int labels[4], n = 0;
    for (int st = 0; st < 4 && rc == 0; st++) {
        rc = ld_next(l, img, labels, &n, err, sizeof err);
        if (rc == 0) ld_step_done(l);
    }
    cr_assert_eq(rc, VJ_ERR_DATA);
    cr_assert(strstr(err, "mix-1.tar") && strstr(err, "data.maxBadFraction"), "%s", err);
    ld_free(l);
    ld_index_free(ix);
}

Test(loader, the_evaluation_pass_reads_each_of_the_ranks_samples_once_in_order)
{
    write_set(3, 5);
    char err[1024];
    int rc;
    ld_index *ix = index_of("shard-{0..2}.tar", 2, 10, &rc, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    int seen[15] = {0};
    for (int r = 0; r < 2; r++) {
        ld_options o = opts_of(ix, r, 2, 4, 2, 8);
        o.train = 0;
        ld_loader *l;
        cr_assert_eq(ld_new(&l, &o, err, sizeof err), 0);
        int64_t max = 0;
        cr_assert_eq(ld_eval_samples(l, &max), r == 0 ? 10 : 5);
        cr_assert_eq(max, 10);
        cr_assert_eq(ld_start(l, NULL, 1, err, sizeof err), 0);
        int ids[4], labels[4], n, last = -1;
        while ((n = next_ids(l, 4, ids, labels)) > 0)
            for (int b = 0; b < n; b++) {
                cr_assert_gt(ids[b], last, "in index order");
                last = ids[b];
                seen[ids[b]]++;
            }
        ld_free(l);
    }
    for (int i = 0; i < 15; i++) cr_assert_eq(seen[i], 1, "sample %d", i);
    ld_index_free(ix);
}

Test(loader, an_image_folder_gives_labels_in_sorted_class_order_nested_folders_included)
{
    const char *classes[3] = {"zebra", "ant", "mole"}; /* sorted: ant mole zebra */
    for (int c = 0; c < 3; c++) {
        char d[512];
        snprintf(d, sizeof d, "%s/%s", dir, classes[c]);
        cr_assert_eq(mkdir(d, 0755), 0);
        for (int i = 0; i < 2; i++) {
            char p[600];
            snprintf(p, sizeof p, "%s/img%d.JPG", d, i);
            unsigned long len;
            unsigned char *j = jpeg_of(10 * c + i, &len);
            FILE *f = fopen(p, "wb");
            fwrite(j, 1, len, f);
            fclose(f);
            tjFree(j);
        }
        snprintf(d, sizeof d, "%s/%s/notes.txt", dir, classes[c]);
        FILE *f = fopen(d, "w");
        fputs("not an image\n", f);
        fclose(f);
    }
    { /* a nested folder's image belongs to its class folder, as in torchvision */
        char p[600];
        snprintf(p, sizeof p, "%s/mole/inner", dir);
        cr_assert_eq(mkdir(p, 0755), 0);
        snprintf(p, sizeof p, "%s/mole/inner/img9.png.jpg", dir);
        unsigned long len;
        unsigned char *j = jpeg_of(29, &len);
        FILE *f = fopen(p, "wb");
        fwrite(j, 1, len, f);
        fclose(f);
        tjFree(j);
    }
    ld_index_options io = {.kind = LD_IMAGEFOLDER, .uri = dir, .key = "data.uri",
                           .num_classes = 3};
    ld_index *ix;
    char err[1024];
    cr_assert_eq(ld_index_new(&ix, &io, err, sizeof err), 0, "%s", err);
    cr_assert_eq(ld_index_units(ix), 7);
    cr_assert(strstr(ld_index_unit(ix, 4), "mole/inner/img9.png.jpg"), "%s",
              ld_index_unit(ix, 4));
    int nc;
    const char *const *names = ld_index_classes(ix, &nc);
    cr_assert_eq(nc, 3);
    cr_assert_str_eq(names[0], "ant");
    cr_assert_str_eq(names[2], "zebra");
    double counts[7] = {0};
    cr_assert_eq(ld_index_scan(ix, 0, 1, 1, counts, err, sizeof err), 0);
    cr_assert_eq(ld_index_set_counts(ix, counts, err, sizeof err), 0);
    ld_options o = opts_of(ix, 0, 1, 3, 2, 1);
    ld_loader *l;
    cr_assert_eq(ld_new(&l, &o, err, sizeof err), 0);
    cr_assert_eq(ld_start(l, NULL, 1, err, sizeof err), 0);
    int expect_label[3] = {2, 0, 1}; /* zebra, ant, mole */
    for (int s = 0; s < 2; s++) {
        int ids[3], labels[3];
        cr_assert_eq(next_ids(l, 3, ids, labels), 3);
        for (int b = 0; b < 3; b++)
            cr_assert_eq(labels[b], expect_label[ids[b] / 10], "image %d has label %d", ids[b],
                         labels[b]);
        ld_step_done(l);
    }
    ld_free(l);
    ld_index_free(ix);
    io.num_classes = 2;
    cr_assert_eq(ld_index_new(&ix, &io, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "model.numClasses=2"), "%s", err);
}

/* An image folder of 20 JPEGs, one cut in half, maxBadFraction 0: the error
 * says what is wrong with which file in plain words, calls it a file (not a
 * shard), has no source location, and says what maxBadFraction would skip
 * it (1 of 20: 0.05). */
Test(loader, a_truncated_image_in_a_folder_is_named_as_a_file_with_maxbadfraction_advice)
{
    char d[512];
    snprintf(d, sizeof d, "%s/cls", dir);
    cr_assert_eq(mkdir(d, 0755), 0);
    for (int i = 0; i < 20; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/img%02d.jpg", d, i);
        unsigned long len;
        unsigned char *j = jpeg_of(i, &len);
        FILE *f = fopen(p, "wb");
        fwrite(j, 1, i == 7 ? len / 2 : len, f);
        fclose(f);
        tjFree(j);
    }
    ld_index_options io = {.kind = LD_IMAGEFOLDER, .uri = dir, .key = "data.uri",
                           .num_classes = 1};
    ld_index *ix;
    char err[2048];
    cr_assert_eq(ld_index_new(&ix, &io, err, sizeof err), 0, "%s", err);
    double counts[20] = {0};
    cr_assert_eq(ld_index_scan(ix, 0, 1, 1, counts, err, sizeof err), 0);
    cr_assert_eq(ld_index_set_counts(ix, counts, err, sizeof err), 0);
    ld_options o = opts_of(ix, 0, 1, 4, 2, 1);
    ld_loader *l;
    cr_assert_eq(ld_new(&l, &o, err, sizeof err), 0);
    cr_assert_eq(ld_start(l, NULL, 1, err, sizeof err), 0);
    float img[4 * SZ * SZ];
    int labels[4], n = 0, rc = 0;
    for (int st = 0; st < 5 && rc == 0; st++) {
        rc = ld_next(l, img, labels, &n, err, sizeof err);
        if (rc == 0) ld_step_done(l);
    }
    cr_assert_eq(rc, VJ_ERR_DATA);
    char want[1200];
    snprintf(want, sizeof want, "image file is truncated: %s/img07.jpg; 1 of 20 images", d);
    cr_expect(strncmp(err, want, strlen(want)) == 0, "%s", err);
    cr_expect(strstr(err, "data.maxBadFraction=0 allows none of its 20: set it to 0.05 or more to "
                          "skip such images"), "%s", err);
    cr_expect(strstr(err, "a bad file is "), "%s", err);
    cr_expect_null(strstr(err, "shard"), "%s", err);
    cr_expect_null(strstr(err, ".c:"), "%s", err);
    ld_free(l);
    ld_index_free(ix);
}
