/* bench/loader_bench.c - the data pipeline's throughput on the CPU: every
 * sample of a webdataset shard (read whole into memory first) through
 * decode_probe, xf_random_resized_crop (torchvision's rule, scale
 * 0.08..1, ratio 3/4..4/3), a coin for the horizontal flip, the JPEG's
 * region at the smallest of the scales 1/1, 1/2, 1/4, 1/8 that keeps the
 * box at least SIZE pixels on each side (decode.h: decode_opts.crop_*,
 * fast_scales), then xf_resample of the box to SIZE x SIZE, normalised with
 * ImageNet's mean and std (xf_resample_ex, a scratch per thread, the
 * filter reading only the box: torch's resize of the crop), into a batch
 * of BATCH samples, by N threads
 * taking whole batches (as a DataLoader's workers do). Prints a line per
 * repetition and a summary line of key=value that bench/loader_bench.py
 * reads: the best repetition's images/s and the process's CPU seconds per
 * image over that repetition.
 *   --decode full decodes every image whole at 1/1 instead (the ablation);
 *   --profile (one thread) also times each stage per image (thread CPU
 *   time).
 * Must not: assert anything (a benchmark prints; tests check behaviour).
 *
 * usage: loader_bench SHARD [--threads N] [--interp bilinear|bicubic]
 *                    [--reps 3] [--batch 64] [--size 224] [--decode region|full]
 *                    [--profile] [--seed S]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "decode.h"
#include "rng.h"
#include "stdfds.h"
#include "tar.h"
#include "transform.h"
#include "wds.h"

typedef struct {
    unsigned char *data;
    size_t len;
    char key[64];
} sample;

static const float MEAN[3] = {0.485f, 0.456f, 0.406f};
static const float STD[3] = {0.229f, 0.224f, 0.225f};
static const double SCALE[2] = {0.08, 1.0};
static const double RATIO[2] = {3.0 / 4.0, 4.0 / 3.0};

static struct {
    sample *s;
    int n, batch, size, region, profile;
    xf_interp interp;
    uint64_t seed, epoch;
    atomic_int next;
    atomic_int failed;
} G;

/* seconds spent per stage, and what the region decoded (profile) */
typedef struct {
    double probe, decode, resample, free;
    double region_px, image_px, scale;
} stage_times;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* the stages are timed in this thread's CPU time: on a shared machine,
 * wall-clock time per stage would count other processes' turns */
static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
           (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

/* one sample into out (3 x size x size floats); 0 or -1 with err */
static int one(int i, float *out, xf_scratch *scratch, stage_times *st, char *err, size_t errlen)
{
    const sample *s = &G.s[i];
    double t0 = G.profile ? thread_cpu() : 0;
    rng_state r;
    rng_seed(&r, G.seed, G.epoch, (uint64_t)i);
    decode_format fmt;
    int w = 0, h = 0;
    if (decode_probe(s->data, s->len, s->key, &fmt, &w, &h, err, errlen)) return -1;
    xf_box box = xf_random_resized_crop(w, h, SCALE, RATIO, &r);
    int flip = (int)rng_below(&r, 2);
    decode_opts o = {0};
    if (G.region) {
        int x0 = (int)box.x, y0 = (int)box.y;
        int x1 = (int)box.x + (int)box.w + (box.x + box.w > (int)box.x + (int)box.w);
        int y1 = (int)box.y + (int)box.h + (box.y + box.h > (int)box.y + (int)box.h);
        o = (decode_opts){.min_width = G.size, .min_height = G.size, .fast_scales = 1,
                          .crop_x = x0, .crop_y = y0, .crop_w = x1 - x0, .crop_h = y1 - y0};
    }
    double t1 = G.profile ? thread_cpu() : 0;
    decode_image img;
    if (decode_image_rgb(s->data, s->len, s->key, &o, &img, err, errlen)) return -1;
    double t2 = G.profile ? thread_cpu() : 0;
    double b[4] = {box.x, box.y, box.w, box.h};
    decode_box_in_image(&img, b);
    xf_params p = {.out_size = G.size, .channels = 3, .interp = G.interp, .mean = MEAN, .std = STD};
    int rc = xf_resample_ex(img.rgb, img.width, img.height, (xf_box){b[0], b[1], b[2], b[3]},
                            NULL, flip, &p, scratch, out, err, errlen);
    double t3 = G.profile ? thread_cpu() : 0;
    if (G.profile) {
        st->region_px += (double)img.width * img.height;
        st->image_px += (double)img.scaled_width * img.scaled_height;
        st->scale += (double)img.scale_num / img.scale_denom;
    }
    decode_image_free(&img);
    if (G.profile) {
        double t4 = thread_cpu();
        st->probe += t1 - t0, st->decode += t2 - t1, st->resample += t3 - t2, st->free += t4 - t3;
    }
    return rc;
}

static void *worker(void *arg)
{
    stage_times *st = arg;
    size_t per = (size_t)3 * G.size * G.size;
    float *batch = malloc(per * (size_t)G.batch * sizeof(float));
    xf_scratch *scratch = xf_scratch_new();
    if (!batch || !scratch) {
        fprintf(stderr, "loader_bench: out of memory for a batch\n");
        atomic_store(&G.failed, 1);
        free(batch);
        xf_scratch_free(scratch);
        return NULL;
    }
    char err[512];
    for (;;) {
        int b = atomic_fetch_add(&G.next, 1);
        int first = b * G.batch;
        if (first >= G.n || atomic_load(&G.failed)) break;
        int last = first + G.batch < G.n ? first + G.batch : G.n;
        for (int i = first; i < last; i++) {
            if (one(i, batch + per * (size_t)(i - first), scratch, st, err, sizeof err)) {
                fprintf(stderr, "loader_bench: %s\n", err);
                atomic_store(&G.failed, 1);
                break;
            }
        }
    }
    free(batch);
    xf_scratch_free(scratch);
    return NULL;
}

/* every image sample of the shard, copied (wds's are borrowed) */
static int load(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *tar = malloc((size_t)n);
    if (!tar || fread(tar, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "loader_bench: cannot read %s\n", path);
        fclose(f);
        free(tar);
        return -1;
    }
    fclose(f);
    tar_mem m = {.data = tar, .len = (size_t)n};
    wds_reader *w = wds_reader_new(path, tar_mem_read, &m, 64u << 20);
    int cap = 0, rc = 0;
    char err[512];
    for (;;) {
        wds_sample s;
        wds_status st = wds_next(w, &s, err, sizeof err);
        if (st == WDS_END) break;
        if (st != WDS_SAMPLE) {
            fprintf(stderr, "loader_bench: %s\n", err);
            rc = -1;
            break;
        }
        if (G.n == cap) {
            cap = cap ? 2 * cap : 1024;
            G.s = realloc(G.s, sizeof *G.s * (size_t)cap);
        }
        sample *d = &G.s[G.n++];
        d->data = malloc(s.image_size);
        memcpy(d->data, s.image, s.image_size);
        d->len = s.image_size;
        snprintf(d->key, sizeof d->key, "%s", s.key);
    }
    wds_reader_free(w);
    free(tar);
    return rc;
}

int main(int argc, char **argv)
{
    stdfds_ensure("loader_bench", 1);
    const char *shard = NULL;
    int threads = 1, reps = 3;
    G.batch = 64, G.size = 224, G.region = 1, G.interp = XF_BILINEAR, G.seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--threads") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--reps") && v) reps = atoi(argv[++i]);
        else if (!strcmp(a, "--batch") && v) G.batch = atoi(argv[++i]);
        else if (!strcmp(a, "--size") && v) G.size = atoi(argv[++i]);
        else if (!strcmp(a, "--seed") && v) G.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--interp") && v) {
            i++;
            if (!strcmp(v, "bilinear")) G.interp = XF_BILINEAR;
            else if (!strcmp(v, "bicubic")) G.interp = XF_BICUBIC;
            else threads = 0;
        } else if (!strcmp(a, "--decode") && v) {
            i++;
            if (!strcmp(v, "region") || !strcmp(v, "full")) G.region = !strcmp(v, "region");
            else threads = 0;
        } else if (!strcmp(a, "--profile")) G.profile = 1;
        else if (a[0] != '-' && !shard) shard = a;
        else threads = 0;
    }
    if (!shard || threads < 1 || reps < 1 || G.batch < 1 || G.size < 1 ||
        (G.profile && threads != 1)) {
        fprintf(stderr, "usage: loader_bench SHARD [--threads N] [--interp bilinear|bicubic] "
                        "[--reps 3] [--batch 64] [--size 224] [--decode region|full] "
                        "[--profile (one thread)] [--seed S]\n");
        return 2;
    }
    if (load(shard)) return 1;
    if (G.n == 0) {
        fprintf(stderr, "loader_bench: %s has no samples\n", shard);
        return 1;
    }
    const char *interp = G.interp == XF_BILINEAR ? "bilinear" : "bicubic";
    const char *dec = G.region ? "region" : "full";
    double best = 1e30, best_cpu = 0;
    stage_times best_st = {0};
    for (int rep = 0; rep < reps; rep++) {
        G.epoch = (uint64_t)rep;
        atomic_store(&G.next, 0);
        pthread_t *t = calloc((size_t)threads, sizeof *t);
        stage_times *st = calloc((size_t)threads, sizeof *st);
        double c0 = cpu_seconds(), t0 = now();
        for (int k = 0; k < threads; k++) pthread_create(&t[k], NULL, worker, &st[k]);
        for (int k = 0; k < threads; k++) pthread_join(t[k], NULL);
        double dt = now() - t0, cpu = cpu_seconds() - c0;
        if (atomic_load(&G.failed)) return 1;
        printf("loader_bench: rep %d: %d images in %.3f s, %.1f images/s, %.3f CPU ms/image\n", rep,
               G.n, dt, G.n / dt, cpu / G.n * 1e3);
        if (dt < best) best = dt, best_cpu = cpu, best_st = st[0];
        free(t);
        free(st);
    }
    if (G.profile) {
        double n = G.n;
        printf("loader_bench: profile (1 thread, best rep), ms/image: probe+crop %.3f, decode "
               "%.3f, resample+normalise %.3f, free %.3f; region decoded %.1f%% of the scaled "
               "image, mean scale %.3f\n",
               best_st.probe / n * 1e3, best_st.decode / n * 1e3, best_st.resample / n * 1e3,
               best_st.free / n * 1e3, 100 * best_st.region_px / best_st.image_px,
               best_st.scale / n);
        printf("loader_bench_profile decode=%s interp=%s probe_ms=%.4f decode_ms=%.4f "
               "resample_ms=%.4f free_ms=%.4f region_frac=%.4f mean_scale=%.4f\n",
               dec, interp, best_st.probe / n * 1e3, best_st.decode / n * 1e3,
               best_st.resample / n * 1e3, best_st.free / n * 1e3,
               best_st.region_px / best_st.image_px, best_st.scale / n);
    }
    printf("loader_bench_result threads=%d interp=%s decode=%s images=%d best_s=%.4f "
           "images_per_s=%.2f cpu_ms_per_image=%.4f\n",
           threads, interp, dec, G.n, best, G.n / best, best_cpu / G.n * 1e3);
    for (int i = 0; i < G.n; i++) free(G.s[i].data);
    free(G.s);
    return 0;
}
