/* tests/test_feed.c - worker/train/feed.c's upscale warning text
 * (feed_upscale_message): the stored size against model.imageSize, the
 * area factor, and the run's planned time, the seconds a step took so far
 * times the steps left, in kubectl's words for a span ("3h20m"); a
 * resumed run names the steps left beside the run's total. The times are
 * given, not measured. */
#include "feed.h"

#include <criterion/criterion.h>

#include <string.h>

TestSuite(feed, .timeout = 10);

Test(feed, the_upscale_warning_plans_the_run_as_its_steps_times_the_seconds_a_step_took)
{
    char msg[512];
    /* 28x28 to 224: 64x the area; 1.2 s x 10000 steps = 12000 s = 3h20m */
    feed_upscale_message(msg, sizeof msg, 28, 28, 224, 1.2, 10000, 10000);
    cr_assert_str_eq(msg, "the images are 28x28 and model.imageSize=224: each is upscaled 64x "
                          "in area and trained at that size's full cost on the CPU, 1.2 s a step "
                          "so far: the run's 10000 steps take about 3h20m; a model.imageSize "
                          "near the images' own size trains many times faster");
}

Test(feed, a_resumed_run_plans_the_steps_left_and_names_the_total)
{
    char msg[512];
    /* 0.5 s x 240 steps left of 1000 = 120 s */
    feed_upscale_message(msg, sizeof msg, 32, 16, 64, 0.5, 240, 1000);
    cr_assert(strstr(msg, "each is upscaled 8x in area") != NULL, "%s", msg);
    cr_assert(strstr(msg, "the run's 1000 steps (240 left) take about 2m;") != NULL, "%s", msg);
}
