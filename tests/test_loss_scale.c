/* tests/test_loss_scale.c - fp16-mixed's loss scaler (worker/train/
 * loss_scale.c): its trajectory (the scale used each step, 1/scale, the
 * scale and growth tracker after, the skipped count) equals, bit for bit,
 * that of tests/ref/grad_scaler_ref.py (torch.cuda.amp.GradScaler's update
 * rule over float32 tensors) on injected overflow sequences: GradScaler's
 * defaults over 4500 steps (backoffs, a growth after 2000 clean steps, a
 * tracker reset by an overflow), growth refused past fp32's range, other
 * factors; then its restore's checks and the test-only injection's
 * parsing. The skip itself (no update on any rank) is tests/test_optim.c
 * and tests/fp16.bats. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loss_scale.h"

TestSuite(loss_scale, .timeout = 120);

/* Runs the reference and the scaler over the same sequence; every line
 * must be equal. */
static void check_against_torch(lscale_params p, int steps, const char *overflows)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/ref/grad_scaler_ref.py %a %a %a %ld %d '%s'",
             (double)p.init_scale, p.growth_factor, p.backoff_factor, p.growth_interval, steps,
             overflows);
    FILE *f = popen(cmd, "r");
    cr_assert(f, "cannot run %s", cmd);
    lscale *s;
    cr_assert_eq(lscale_new(&s, &p), 0);
    char line[512];
    int n = 0, skips = 0, grew = 0;
    while (fgets(line, sizeof line, f)) {
        int step, skipped;
        char used[64], inv[64], after[64];
        long tracker, total;
        cr_assert_eq(sscanf(line, "%d %d %63s %63s %63s %ld %ld", &step, &skipped, used, inv,
                            after, &tracker, &total), 7, "reference line: %s", line);
        cr_assert_eq(step, n);
        /* is this step one of the overflows? */
        int found = 0;
        for (const char *c = overflows; *c;) {
            char *end;
            long v = strtol(c, &end, 10);
            if (v == step) found = 1;
            c = *end ? end + 1 : end;
        }
        float su = strtof(used, NULL), si = strtof(inv, NULL), sa = strtof(after, NULL);
        cr_assert(lscale_scale(s) == su, "step %d: scale used %a, torch %a", step,
                  (double)lscale_scale(s), (double)su);
        cr_assert(lscale_inv(s) == si, "step %d: inv %a, torch %a", step, (double)lscale_inv(s),
                  (double)si);
        float before = lscale_scale(s);
        cr_assert_eq(lscale_update(s, found), skipped, "step %d: skipped", step);
        cr_assert(lscale_scale(s) == sa, "step %d: scale after %a, torch %a", step,
                  (double)lscale_scale(s), (double)sa);
        cr_assert_eq(lscale_growth_tracker(s), tracker, "step %d: tracker", step);
        cr_assert_eq(lscale_skipped(s), total, "step %d: skipped count", step);
        skips += skipped;
        grew += lscale_scale(s) > before;
        n++;
    }
    cr_assert_eq(pclose(f), 0, "%s failed (python3-torch installed?)", cmd);
    cr_assert_eq(n, steps, "the reference printed %d of %d steps", n, steps);
    cr_assert_gt(skips, 0);
    (void)grew;
    lscale_free(s);
}

Test(loss_scale, gradscaler_defaults_follow_torch_over_4500_steps_with_injected_overflows)
{
    lscale_params p = lscale_defaults();
    cr_assert(p.init_scale == 65536.0f && p.growth_factor == 2.0 && p.backoff_factor == 0.5 &&
              p.growth_interval == 2000);
    /* 0-2: three backoffs; 100: one more; 2101 clean steps then growth at
     * step 2100 (tracker 2000 after 101); 3000: an overflow resets the
     * tracker mid-way; 4400: none after it grows */
    check_against_torch(p, 4500, "0,1,2,100,3000,3001,4400");
}

Test(loss_scale, growth_is_refused_past_fp32_range_as_torch_refuses_it)
{
    lscale_params p = {.init_scale = 0x1p126f, .growth_factor = 2.0, .backoff_factor = 0.5,
                       .growth_interval = 3};
    check_against_torch(p, 14, "10");
    lscale *s;
    lscale_new(&s, &p);
    for (int i = 0; i < 9; i++) lscale_update(s, 0);
    cr_assert(lscale_scale(s) == 0x1p127f, "2^127 is the largest power of two in fp32");
    lscale_free(s);
}

Test(loss_scale, other_factors_and_intervals_follow_torch)
{
    lscale_params p = {.init_scale = 1.0f, .growth_factor = 4.0, .backoff_factor = 0.25,
                       .growth_interval = 5};
    check_against_torch(p, 40, "0,1,2,3,4,5,20,21,33");
}

Test(loss_scale, a_step_without_overflow_is_never_skipped_and_one_with_is)
{
    lscale_params p = lscale_defaults();
    lscale *s;
    cr_assert_eq(lscale_new(&s, &p), 0);
    cr_assert_eq(lscale_update(s, 0), 0);
    cr_assert_eq(lscale_growth_tracker(s), 1);
    cr_assert(lscale_scale(s) == 65536.0f);
    cr_assert_eq(lscale_update(s, 1), 1);
    cr_assert(lscale_scale(s) == 32768.0f);
    cr_assert_eq(lscale_growth_tracker(s), 0);
    cr_assert_eq(lscale_skipped(s), 1);
    cr_assert(lscale_inv(s) == 0x1p-15f);
    lscale_free(s);
}

Test(loss_scale, restore_takes_a_checkpoints_state_and_refuses_values_out_of_range)
{
    lscale_params p = lscale_defaults();
    lscale *s;
    cr_assert_eq(lscale_new(&s, &p), 0);
    cr_assert_eq(lscale_restore(s, 1024.0f, 1999, 7), 0);
    cr_assert(lscale_scale(s) == 1024.0f);
    cr_assert_eq(lscale_growth_tracker(s), 1999);
    cr_assert_eq(lscale_skipped(s), 7);
    lscale_update(s, 0); /* the 2000th clean step: grows */
    cr_assert(lscale_scale(s) == 2048.0f);
    cr_assert_eq(lscale_growth_tracker(s), 0);
    cr_assert_eq(lscale_restore(s, 0.0f, 0, 0), -1);
    cr_assert_eq(lscale_restore(s, NAN, 0, 0), -1);
    cr_assert_eq(lscale_restore(s, INFINITY, 0, 0), -1);
    cr_assert_eq(lscale_restore(s, 8.0f, 2000, 0), -1);
    cr_assert_eq(lscale_restore(s, 8.0f, -1, 0), -1);
    cr_assert_eq(lscale_restore(s, 8.0f, 0, -1), -1);
    cr_assert(lscale_scale(s) == 2048.0f, "a refused restore changes nothing");
    lscale_free(s);
}

Test(loss_scale, the_test_injection_names_steps_and_ranks_and_ignores_malformed_entries)
{
    cr_assert_eq(lscale_injected(NULL, 3, 0), 0);
    cr_assert_eq(lscale_injected("", 3, 0), 0);
    cr_assert_eq(lscale_injected("3", 3, 0), 1);
    cr_assert_eq(lscale_injected("3", 3, 1), 1);
    cr_assert_eq(lscale_injected("3", 4, 0), 0);
    cr_assert_eq(lscale_injected("3,5@1", 5, 1), 1);
    cr_assert_eq(lscale_injected("3,5@1", 5, 0), 0);
    cr_assert_eq(lscale_injected("x,5", 5, 0), 1);
    cr_assert_eq(lscale_injected("5x,6", 5, 0), 0);
    cr_assert_eq(lscale_injected("5@,6", 5, 0), 0);
    cr_assert_eq(lscale_injected("12", 1, 0), 0);
}
