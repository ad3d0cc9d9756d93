/* worker/data/data.h - the training and test data.
 *
 * Owns: loading Fashion-MNIST from gzipped (or plain) IDX files through zlib,
 * validating them, the per-epoch deterministic shuffle, augmentation (random
 * crop with 2 pixels of zero padding, horizontal flip) and normalisation, and
 * the loader position (epoch, index) that checkpoints will save.
 * Must not: know the model; images come out as (B,C,S,S) floats.
 */
#ifndef VITJOB_DATA_H
#define VITJOB_DATA_H

#include <stddef.h>
#include <stdint.h>

#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f

typedef struct {
    int n, rows, cols;
    uint8_t *pixels; /* n * rows * cols */
    uint8_t *labels; /* n */
    char images_path[1024]; /* the files read, for messages about them */
    char labels_path[1024];
} dataset;

/* Loads the split ("train" or "t10k") from dir (a path or file:// URI):
 * <dir>/<split>-images-idx3-ubyte.gz and -labels-idx1-ubyte.gz (or without
 * .gz). Checks magic numbers, sizes, truncation and that labels < max_label.
 * On success *out is the caller's, freed with dataset_free. Returns 0 or
 * a vj_err (VJ_ERR_DATA; VJ_ERR_OUT_OF_MEMORY) with a message naming the file
 * in err. Only regular files are read (a FIFO or directory is refused). */
int dataset_load_idx(dataset **out, const char *dir, const char *split, int max_label,
                     char *err, size_t errlen);
void dataset_free(dataset *d); /* accepts NULL */

/* Checks that d's images are image_size x image_size; otherwise VJ_ERR_DATA
 * with a message naming d's images file, its size and model.imageSize. */
int dataset_check_image_size(const dataset *d, int image_size, char *err, size_t errlen);
/* Checks that the test split's images have the training split's size;
 * otherwise VJ_ERR_DATA naming both images files and both sizes. */
int dataset_check_same_size(const dataset *test, const dataset *train, char *err, size_t errlen);

/* Writes image i, normalised, into out (rows*cols floats); with augment,
 * the crop and flip are drawn from (seed, epoch, i), so they do not depend
 * on batch order. */
void dataset_image(const dataset *d, int i, int augment, uint64_t seed, long epoch, float *out);

typedef struct {
    const dataset *d;
    uint64_t seed;
    int augment;
    long epoch;      /* current epoch */
    long index;      /* next position in this epoch's permutation */
    int *perm;       /* this epoch's order */
} data_loader;

/* A loader over d that shuffles every epoch from seed. Returns 0 or
 * VJ_ERR_OUT_OF_MEMORY. Free with data_loader_free. */
int data_loader_init(data_loader *l, const dataset *d, uint64_t seed, int augment);
void data_loader_free(data_loader *l);
/* Moves to a position (epoch, index), e.g. when resuming. */
void data_loader_seek(data_loader *l, long epoch, long index);
/* At the start of an optimizer step of G samples: if fewer than G are left
 * in this epoch, the next epoch starts (drop-last at step granularity). */
void data_loader_begin_step(data_loader *l, int G);
/* Skips k samples of the current step (other ranks' part of the global
 * batch); call between data_loader_begin_step and the end of the step. */
void data_loader_skip(data_loader *l, long k);
/* The next B samples, in order; an epoch ends when fewer than B samples are
 * left (drop-last), and the next epoch's shuffle starts. */
void data_loader_next(data_loader *l, int B, float *images, int *labels);

#endif
