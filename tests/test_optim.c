/* tests/test_optim.c - worker/train/optim.c: the learning-rate schedule (linear
 * warmup, then cosine to minLr, or constant). */
#include <criterion/criterion.h>
#include <string.h>

#include "optim.h"

Test(optim, lr_schedule_warms_up_linearly_then_follows_the_cosine)
{
    optimizer_config oc = {.lr = 1.0, .warmup_steps = 4, .min_lr = 0.1, .schedule = SCHEDULE_COSINE};
    cr_assert_float_eq(optim_lr_at(&oc, 0, 14), 0.25, 1e-12);
    cr_assert_float_eq(optim_lr_at(&oc, 3, 14), 1.0, 1e-12);
    cr_assert_float_eq(optim_lr_at(&oc, 4, 14), 1.0, 1e-12);
    cr_assert_float_eq(optim_lr_at(&oc, 9, 14), 0.55, 1e-12);
    cr_assert(optim_lr_at(&oc, 13, 14) > 0.1 && optim_lr_at(&oc, 13, 14) < 0.13);
    oc.schedule = SCHEDULE_CONSTANT;
    cr_assert_float_eq(optim_lr_at(&oc, 9, 14), 1.0, 1e-12);
}
