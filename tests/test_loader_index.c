/* tests/test_loader_index.c - worker/data/loader_index.c: shards listed
 * (a brace pattern, a prefix) and counted by the ranks' scans; bad data
 * sets refused at the scan, before training: a label at or above
 * numClasses, a missing shard or one that is not a tar, an empty data set,
 * fewer training shards than ranks (but not evaluation shards).
 *
 * The shards are made here (tests/loader_fixture.h). */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exitcode.h"
#include "loader.h"
#include "loader_fixture.h"

TestSuite(loader_index, .init = setup, .fini = teardown, .timeout = 120);

Test(loader_index, a_label_at_or_above_num_classes_is_refused_at_the_scan)
{
    spec s[3] = {{0, 1}, {1, 12}, {2, 3}};
    write_shard("lab-0.tar", s, 3);
    char err[1024];
    int rc;
    cr_assert_null(index_of("lab-0.tar", 1, 10, &rc, err, sizeof err));
    cr_assert_eq(rc, VJ_ERR_DATA);
    cr_assert(strstr(err, "lab-0.tar") && strstr(err, "s0001") && strstr(err, "12") &&
              strstr(err, "model.numClasses=10"), "%s", err);
}

Test(loader_index, a_missing_shard_and_a_file_that_is_not_a_tar_are_refused_at_the_scan)
{
    write_set(1, 3);
    char err[1024], path[512];
    int rc;
    cr_assert_null(index_of("shard-{0..1}.tar", 1, 10, &rc, err, sizeof err));
    cr_assert_eq(rc, VJ_ERR_DATA);
    cr_assert(strstr(err, "shard-1.tar"), "%s", err);
    snprintf(path, sizeof path, "%s/shard-1.tar", dir);
    FILE *f = fopen(path, "w");
    fputs("this is not a tar archive, only some text that goes on for a while ...\n", f);
    fclose(f);
    cr_assert_null(index_of("shard-{0..1}.tar", 1, 10, &rc, err, sizeof err));
    cr_assert_eq(rc, VJ_ERR_DATA);
    cr_assert(strstr(err, "shard-1.tar"), "%s", err);
}

Test(loader_index, an_empty_data_set_and_fewer_training_shards_than_ranks_are_refused_but_not_evaluation_shards)
{
    write_shard("empty-0.tar", NULL, 0);
    char err[1024];
    int rc;
    cr_assert_null(index_of("empty-0.tar", 1, 10, &rc, err, sizeof err));
    cr_assert_eq(rc, VJ_ERR_DATA);
    cr_assert(strstr(err, "empty"), "%s", err);
    write_set(2, 3);
    cr_assert_null(index_of("shard-{0..1}.tar", 3, 10, &rc, err, sizeof err));
    cr_assert_eq(rc, VJ_ERR_CONFIG);
    cr_assert(strstr(err, "2 shards for 3 ranks"), "%s", err);
    /* an evaluation split may have fewer: the rank without one evaluates nothing */
    char uri[512];
    snprintf(uri, sizeof uri, "file://%s/shard-{0..1}.tar", dir);
    ld_index_options io = {.kind = LD_WEBDATASET, .uri = uri, .key = "data.testUri",
                           .num_classes = 10, .eval = 1};
    ld_index *ix = NULL;
    cr_assert_eq(ld_index_new(&ix, &io, err, sizeof err), 0, "%s", err);
    double counts[2] = {0};
    for (int r = 0; r < 3; r++)
        cr_assert_eq(ld_index_scan(ix, r, 3, 1, counts, err, sizeof err), 0, "%s", err);
    cr_assert_eq(ld_index_set_counts(ix, counts, err, sizeof err), 0);
    cr_assert_eq(ld_index_samples(ix), 6);
    ld_index_free(ix);
}

Test(loader_index, a_prefix_lists_its_tar_shards_in_order)
{
    write_set(3, 2);
    char err[1024];
    int rc;
    ld_index *ix = index_of("", 1, 10, &rc, err, sizeof err); /* the folder itself */
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(ld_index_units(ix), 3);
    cr_assert(strstr(ld_index_unit(ix, 2), "shard-2.tar"));
    ld_index_free(ix);
}
