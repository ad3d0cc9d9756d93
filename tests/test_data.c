/* tests/test_data.c - the Fashion-MNIST IDX loader, its error messages and
 * exit codes on bad files, and the determinism of shuffling and augmentation.
 * Bad files are written by the test into a temporary directory. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "config.h"
#include "data.h"

static char dir[64];

static void mkdir_tmp(void)
{
    snprintf(dir, sizeof dir, "/tmp/vitjob-data-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void rm_tmp(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* Writes an IDX file (gzipped) with `n` items of r x c (labels when r == 0);
 * `cut` bytes are dropped from the end; magic overridable. */
static void write_idx(const char *name, uint32_t magic, int n, int r, int c, int cut)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.gz", dir, name);
    gzFile gz = gzopen(path, "wb");
    cr_assert_not_null(gz);
    unsigned char hdr[16];
    int ndims = r ? 3 : 1;
    put_be32(hdr, magic ? magic : 0x0800u | (uint32_t)ndims);
    put_be32(hdr + 4, (uint32_t)n);
    if (r) put_be32(hdr + 8, (uint32_t)r), put_be32(hdr + 12, (uint32_t)c);
    gzwrite(gz, hdr, 4 + 4 * ndims);
    size_t len = (size_t)n * (r ? (size_t)r * c : 1) - (size_t)cut;
    unsigned char *body = malloc(len);
    for (size_t i = 0; i < len; i++) body[i] = r ? (unsigned char)(i * 7) : (unsigned char)(i % 10);
    gzwrite(gz, body, (unsigned)len);
    free(body);
    gzclose(gz);
}

static void good_split(const char *split, int n)
{
    char name[64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", split);
    write_idx(name, 0, n, 28, 28, 0);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", split);
    write_idx(name, 0, n, 0, 0, 0);
}

static int load(dataset **d, char *err, size_t errlen)
{
    return dataset_load_idx(d, dir, "train", 10, err, errlen);
}

TestSuite(data, .init = mkdir_tmp, .fini = rm_tmp);

Test(data, valid_files_load_with_their_sizes)
{
    good_split("train", 50);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(load(&d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d->n, 50);
    cr_assert_eq(d->rows, 28);
    cr_assert_eq(d->labels[13], 3);
    dataset_free(d);
}

Test(data, missing_file_is_exit_3_naming_the_file)
{
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(load(&d, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "train-images-idx3-ubyte") && strstr(err, dir), "%s", err);
}

Test(data, truncated_images_are_exit_3_naming_the_file)
{
    write_idx("train-images-idx3-ubyte", 0, 50, 28, 28, 100);
    write_idx("train-labels-idx1-ubyte", 0, 50, 0, 0, 0);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(load(&d, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "train-images-idx3-ubyte.gz") && strstr(err, "truncated"), "%s", err);
}

Test(data, wrong_magic_is_exit_3_with_both_magics)
{
    write_idx("train-images-idx3-ubyte", 0x00000801, 50, 28, 28, 0);
    write_idx("train-labels-idx1-ubyte", 0, 50, 0, 0, 0);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(load(&d, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "bad IDX magic 0x00000801") && strstr(err, "0x00000803"), "%s", err);
}

Test(data, label_count_mismatch_is_exit_3)
{
    write_idx("train-images-idx3-ubyte", 0, 50, 28, 28, 0);
    write_idx("train-labels-idx1-ubyte", 0, 49, 0, 0, 0);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(load(&d, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "49 labels for 50 images"), "%s", err);
}

Test(data, label_beyond_num_classes_is_exit_3)
{
    good_split("train", 50);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(dataset_load_idx(&d, dir, "train", 5, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "not below model.numClasses=5"), "%s", err);
}

/* Every IDX error names the file, not only the directory: four files sit
 * side by side (train and t10k, images and labels), and "dir: ..." leaves the
 * reader to guess which one is wrong. */
static void file_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s.gz", dir, name);
}

Test(data, label_count_mismatch_names_the_labels_file_and_the_images_file)
{
    write_idx("train-images-idx3-ubyte", 0, 50, 28, 28, 0);
    write_idx("train-labels-idx1-ubyte", 0, 49, 0, 0, 0);
    dataset *d = NULL;
    char err[512], labels[300], images[300];
    file_path(labels, sizeof labels, "train-labels-idx1-ubyte");
    file_path(images, sizeof images, "train-images-idx3-ubyte");
    cr_assert_eq(load(&d, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strncmp(err, labels, strlen(labels)) == 0, "%s", err);
    cr_assert(strstr(err, images), "%s", err);
}

Test(data, label_beyond_num_classes_names_the_labels_file)
{
    good_split("train", 50);
    dataset *d = NULL;
    char err[512], labels[300];
    file_path(labels, sizeof labels, "train-labels-idx1-ubyte");
    cr_assert_eq(dataset_load_idx(&d, dir, "train", 5, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strncmp(err, labels, strlen(labels)) == 0, "%s", err);
}

Test(data, images_of_the_wrong_size_name_the_images_file_and_both_sizes)
{
    write_idx("train-images-idx3-ubyte", 0, 20, 27, 27, 0);
    write_idx("train-labels-idx1-ubyte", 0, 20, 0, 0, 0);
    dataset *d = NULL;
    char err[512], images[300], want[400];
    cr_assert_eq(load(&d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(dataset_check_image_size(d, 27, err, sizeof err), 0);
    cr_assert_eq(dataset_check_image_size(d, 28, err, sizeof err), VJ_ERR_DATA);
    file_path(images, sizeof images, "train-images-idx3-ubyte");
    snprintf(want, sizeof want, "%s: images are 27x27 but model.imageSize=28", images);
    cr_assert_str_eq(err, want);
    dataset_free(d);
}

Test(data, test_images_of_another_size_name_both_images_files)
{
    write_idx("train-images-idx3-ubyte", 0, 20, 28, 28, 0);
    write_idx("train-labels-idx1-ubyte", 0, 20, 0, 0, 0);
    write_idx("t10k-images-idx3-ubyte", 0, 10, 27, 27, 0);
    write_idx("t10k-labels-idx1-ubyte", 0, 10, 0, 0, 0);
    dataset *train = NULL, *test = NULL;
    char err[512], tr[300], te[300];
    cr_assert_eq(dataset_load_idx(&train, dir, "train", 10, err, sizeof err), 0, "%s", err);
    cr_assert_eq(dataset_load_idx(&test, dir, "t10k", 10, err, sizeof err), 0, "%s", err);
    cr_assert_eq(dataset_check_same_size(train, train, err, sizeof err), 0);
    cr_assert_eq(dataset_check_same_size(test, train, err, sizeof err), VJ_ERR_DATA);
    file_path(tr, sizeof tr, "train-images-idx3-ubyte");
    file_path(te, sizeof te, "t10k-images-idx3-ubyte");
    cr_assert(strncmp(err, te, strlen(te)) == 0, "%s", err);
    cr_assert(strstr(err, tr) && strstr(err, "27x27") && strstr(err, "28x28"), "%s", err);
    dataset_free(train);
    dataset_free(test);
}

/* labels are 0..9: with model.numClasses=9 the label 9 indexes one past the
 * head's last class */
Test(data, a_label_equal_to_num_classes_is_refused)
{
    good_split("train", 50);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(dataset_load_idx(&d, dir, "train", 9, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "label 9 of sample 9 is not below model.numClasses=9"), "%s", err);
    cr_assert_null(d);
    cr_assert_eq(dataset_load_idx(&d, dir, "train", 10, err, sizeof err), 0, "%s", err);
    dataset_free(d);
}

/* A FIFO or a directory where a data file should be: refused at once (a
 * FIFO without a writer would block a reader forever). */
Test(data, a_fifo_or_directory_as_a_data_file_is_refused_without_blocking, .timeout = 20)
{
    good_split("train", 50);
    char path[300];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkfifo(path, 0600), 0);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(load(&d, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "train-images-idx3-ubyte.gz: cannot open dataset file: is a FIFO"),
              "%s", err);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkdir(path, 0755), 0);
    cr_assert_eq(load(&d, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "is a directory, not a regular file"), "%s", err);
    cr_assert_eq(rmdir(path), 0);
}

Test(data, garbage_that_is_not_gzip_or_idx_is_exit_3)
{
    char path[256];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    FILE *f = fopen(path, "w");
    fputs("hello", f);
    fclose(f);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(load(&d, err, sizeof err), VJ_ERR_DATA);
    cr_assert(strstr(err, "train-images-idx3-ubyte"), "%s", err);
}

Test(data, shuffle_is_a_permutation_fixed_by_seed_and_epoch)
{
    good_split("train", 64);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(load(&d, err, sizeof err), 0);
    data_loader a, b, c;
    data_loader_init(&a, d, 7, 0);
    data_loader_init(&b, d, 7, 0);
    data_loader_init(&c, d, 8, 0);
    int seen[64] = {0}, same_c = 1;
    for (int i = 0; i < 64; i++) {
        cr_assert_eq(a.perm[i], b.perm[i]);
        same_c &= a.perm[i] == c.perm[i];
        seen[a.perm[i]]++;
    }
    for (int i = 0; i < 64; i++) cr_assert_eq(seen[i], 1);
    cr_assert(!same_c, "another seed gave the same order");
    int first[64];
    memcpy(first, a.perm, sizeof first);
    data_loader_seek(&a, 1, 0);
    cr_assert(memcmp(first, a.perm, sizeof first) != 0, "epoch 1 repeats epoch 0's order");
    data_loader_seek(&a, 0, 0);
    cr_assert(memcmp(first, a.perm, sizeof first) == 0, "seeking back does not restore the order");
    data_loader_free(&a), data_loader_free(&b), data_loader_free(&c);
    dataset_free(d);
}

Test(data, loader_drops_the_last_partial_batch_and_starts_the_next_epoch)
{
    good_split("train", 10);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(load(&d, err, sizeof err), 0);
    data_loader l;
    data_loader_init(&l, d, 1, 0);
    float img[4 * 784];
    int lab[4];
    data_loader_next(&l, 4, img, lab);
    data_loader_next(&l, 4, img, lab);
    cr_assert_eq(l.epoch, 0);
    data_loader_next(&l, 4, img, lab); /* 2 left: new epoch */
    cr_assert_eq(l.epoch, 1);
    cr_assert_eq(l.index, 4);
    data_loader_free(&l);
    dataset_free(d);
}

Test(data, augmentation_is_deterministic_and_off_means_plain_normalisation)
{
    good_split("train", 4);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(load(&d, err, sizeof err), 0);
    float a[784], b[784], plain[784];
    dataset_image(d, 2, 1, 99, 3, a);
    dataset_image(d, 2, 1, 99, 3, b);
    cr_assert(memcmp(a, b, sizeof a) == 0);
    dataset_image(d, 2, 0, 99, 3, plain);
    for (int i = 0; i < 784; i++) {
        float want = ((float)d->pixels[2 * 784 + i] / 255.0f - FMNIST_MEAN) / FMNIST_STD;
        cr_assert_float_eq(plain[i], want, 1e-6);
    }
    int differs = 0;
    for (long e = 0; e < 8; e++) {
        dataset_image(d, 2, 1, 99, e, a);
        differs |= memcmp(a, plain, sizeof a) != 0;
    }
    cr_assert(differs, "augmentation never changed the image in 8 epochs");
    dataset_free(d);
}

Test(data, epochs_end_at_optimizer_step_boundaries_whatever_the_micro_batch)
{
    good_split("train", 10);
    dataset *d = NULL;
    char err[512];
    cr_assert_eq(load(&d, err, sizeof err), 0);
    /* global batch 4 in micro-batches of 2 or of 4: the same samples per step */
    int seen[2][3][4];
    for (int v = 0; v < 2; v++) {
        int micro = v ? 4 : 2;
        data_loader l;
        data_loader_init(&l, d, 3, 0);
        float img[4 * 784];
        for (int step = 0; step < 3; step++) {
            data_loader_begin_step(&l, 4);
            for (int k = 0; k < 4; k += micro) data_loader_next(&l, micro, img, &seen[v][step][k]);
            if (step < 2) cr_assert_eq(l.epoch, 0);
        }
        cr_assert_eq(l.epoch, 1, "step 3 starts epoch 1 (2 samples were left, not 4)");
        data_loader_free(&l);
    }
    cr_assert(memcmp(seen[0], seen[1], sizeof seen[0]) == 0,
              "micro-batch size changed which samples a step sees");
    dataset_free(d);
}
