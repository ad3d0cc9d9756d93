/* worker/data/loader_index.h - what the data set's index (loader_index.c)
 * lends the loader's pipeline (loader.c): the index's fields, and the order
 * of its units in an epoch. Included by loader.c and loader_index.c only.
 * Must not: be included outside them: the index is opaque to everyone
 * else (loader.h's ld_index_* functions).
 */
#ifndef VITJOB_LOADER_INDEX_H
#define VITJOB_LOADER_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "loader.h"

struct ld_index {
    ld_kind kind;
    char **units;
    size_t n;
    int *labels;       /* imagefolder: per file */
    char **classes;    /* imagefolder: in label order */
    int n_classes;
    double *counts;    /* per unit, after ld_index_set_counts */
    uint64_t total;
    char key[64];
    char *endpoint;
    int num_classes;
    uint64_t max_member;
    int eval;
};

/* The order of the units in an epoch, from the options' index, seed, train,
 * rank and world (loader.h: "Order of one rank in epoch e"). Caller frees
 * the arrays. */

/* Every unit of the data set in epoch e's order (training: permuted from
 * (seed, e); evaluation: index order): a fresh array, NULL out of memory. */
size_t *ld_epoch_order(const ld_options *o, long epoch);

/* This rank's units in epoch e, in order: a fresh array of *n indices. */
size_t *ld_rank_units(const ld_options *o, long epoch, size_t *n);

/* The samples of every rank in epoch e: this rank's, and the fewest. */
int64_t ld_epoch_counts(const ld_options *o, long epoch, int64_t *mine);

#endif
