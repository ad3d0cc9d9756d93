/* api/randaug_spec.h - what a data.randAugment string says: timm's RandAugment
 * config string ("rand-m9-mstd0.5-inc1"), parsed and checked.
 *
 * Owns: the grammar of the string and its defaults, so that the operator
 * (which validates a ViTJob's spec through api/config.c) and the worker refuse
 * the same strings with the same message. Must not: draw random numbers or
 * touch pixels (worker/data/randaug.c applies what this parses), log, or
 * allocate.
 *
 * The grammar is timm's rand_augment_transform: sections separated by '-',
 * the first "rand", each further one a key followed at its first digit by a
 * number:
 *   m<int>      magnitude, 0..1000 (default 10: timm's _LEVEL_DENOM)
 *   n<int>      ops per image, 0..100 (default 2)
 *   p<float>    probability that each chosen op is applied, [0, 1]
 *               (default 0.5)
 *   mstd<float> standard deviation of the gaussian noise added to the
 *               magnitude each time an op is applied (default 0: none);
 *               above 100: the magnitude is drawn uniformly in [0, m]
 *               instead, as timm does
 *   mmax<int>   the magnitude (noise included) is clipped to [0, mmax];
 *               0 or absent: [0, 10], as timm's `magnitude_max or 10`
 *   inc<int>    the increasing-severity op set (timm's
 *               _RAND_INCREASING_TRANSFORMS) instead of _RAND_TRANSFORMS.
 *               timm turns it on for any number (its bool("0") is True);
 *               so does this for 1, 2, ...; "inc0" is refused, since it
 *               means "on" there while reading as "off".
 * Refused where timm would accept or ignore something unclear: a section
 * without a number or with an unknown key (timm skips the former), a key
 * given twice (timm keeps the first mstd/mmax but the last m/n/p), an empty
 * section, a malformed or out-of-range number, and timm's transform-set
 * sections ("t..."; the "weights" and "3a" sets are not built here).
 */
#ifndef VITJOB_RANDAUG_SPEC_H
#define VITJOB_RANDAUG_SPEC_H

#include <stddef.h>

typedef struct {
    int enabled;          /* 0: the string was "" (RandAugment off); the rest are defaults */
    int num_ops;          /* n */
    int magnitude;        /* m */
    double magnitude_std; /* mstd; INFINITY: uniform in [0, m] (timm: mstd > 100) */
    int magnitude_max;    /* mmax as given (0: not given); the clip bound is
                           * randaug_spec_upper(s) */
    int increasing;       /* inc */
    double prob;          /* p */
} randaug_spec;

/* Parses s into *out (defaults for what s leaves out). key names the config
 * key in messages ("data.randAugment"). Returns 0, or -1 with a message in
 * err naming the key, the string and the offending section. */
int randaug_spec_parse(const char *s, const char *key, randaug_spec *out, char *err,
                       size_t errlen);

/* The bound the magnitude is clipped to: mmax, or 10 when mmax is 0. */
double randaug_spec_upper(const randaug_spec *s);

#endif
