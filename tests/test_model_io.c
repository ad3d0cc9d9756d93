/* tests/test_model_io.c - worker/train/model_io.c: the model's weights round trip
 * exactly by timm name, and a file given as model.init is refused, naming
 * the tensor, when a tensor is missing, extra, named twice, of another shape
 * or dtype, or holds a NaN or an Inf; a refused file leaves the model as it
 * was. With timm's adaptations (model_load_tensors with options): a head of
 * another class count, or none, is new (timm's init, from the seed) or
 * refused under model.initHead=keep naming both counts; pos_embed of another
 * grid is resampled (class token kept); another patch size is refused naming
 * both sizes and the file; without options every difference stays an
 * error. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "model_io.h"
#include "pos_resample.h"
#include "safetensors.h"

static char dir[64], path[128];

static void mk(void)
{
    snprintf(dir, sizeof dir, "/tmp/vitjob-mio-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
}

static void rm(void)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(model_io, .init = mk, .fini = rm, .timeout = 60);

static const model_config tiny_mc = {.image_size = 8, .patch_size = 4, .channels = 1, .dim = 8,
                                     .depth = 1, .heads = 2, .mlp_ratio = 2.0,
                                     .num_classes = 3};

static vit_model *tiny(int dim, uint64_t seed)
{
    model_config mc = tiny_mc;
    mc.dim = dim;
    vit_model *m;
    char err[256];
    cr_assert_eq(model_new(&m, &mc, 2, NULL, ops_cpu(), err, sizeof err), 0, "%s", err);
    model_init_random(m, seed);
    return m;
}

/* The model's tensors as st_write takes them (data: a copy of its
 * parameters, the caller's to free through *params), room for one more. */
static st_tensor *tensors_of(vit_model *m, float **params)
{
    int nt = model_num_tensors(m);
    st_tensor *ts = calloc((size_t)nt + 1, sizeof *ts);
    *params = malloc(model_num_params(m) * sizeof(float));
    cr_assert(ts && *params);
    memcpy(*params, model_params(m), model_num_params(m) * sizeof(float));
    for (int i = 0; i < nt; i++) {
        const model_tensor *t = model_tensor_at(m, i);
        ts[i] = (st_tensor){t->name, ST_F32, t->ndim, {0}, *params + t->offset};
        for (int d = 0; d < t->ndim; d++) ts[i].shape[d] = t->shape[d];
    }
    return ts;
}

/* model_load_safetensors fails with each needle in its message and leaves
 * the model's parameters as they were. */
static void expect_load_error(vit_model *m, const char *needle, const char *needle2)
{
    size_t n = model_num_params(m);
    float *before = malloc(n * sizeof(float));
    cr_assert_not_null(before);
    memcpy(before, model_params(m), n * sizeof(float));
    char err[512] = "";
    cr_assert_eq(model_load_safetensors(m, path, err, sizeof err), -1, "loaded (wanted: %s)",
                 needle);
    cr_assert(strstr(err, path) && strstr(err, needle) && (!needle2 || strstr(err, needle2)),
              "wanted '%s'%s%s in: %s", needle, needle2 ? " and " : "", needle2 ? needle2 : "",
              err);
    cr_assert(memcmp(before, model_params(m), n * sizeof(float)) == 0,
              "a refused file changed the model");
    free(before);
}

static int index_of(vit_model *m, const char *name)
{
    int i = model_find_tensor(m, name);
    cr_assert(i >= 0, "no tensor %s", name);
    return i;
}

Test(model_io, model_weights_round_trip_exactly_by_timm_name)
{
    vit_model *a = tiny(8, 5), *b = tiny(8, 6);
    char err[256];
    cr_assert_eq(model_save_safetensors(a, &tiny_mc, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_load_safetensors(b, path, err, sizeof err), 0, "%s", err);
    cr_assert(memcmp(model_params(a), model_params(b), model_num_params(a) * sizeof(float)) == 0);
    st_file *f;
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    cr_assert_not_null(st_find(f, "blocks.0.attn.qkv.weight"));
    cr_assert_not_null(strstr(st_meta(f, "vitjob.model"), "\"dim\":8"));
    st_close(f);
    model_free(a);
    model_free(b);
}

Test(model_io, loading_weights_of_another_shape_names_the_tensor_and_both_shapes)
{
    vit_model *a = tiny(8, 5), *b = tiny(16, 5);
    char err[256];
    cr_assert_eq(model_save_safetensors(a, &tiny_mc, path, err, sizeof err), 0, "%s", err);
    expect_load_error(b, "'cls_token' has shape [1,1,8], the model needs [1,1,16]", NULL);
    model_free(a);
    model_free(b);
}

Test(model_io, loading_weights_with_a_missing_or_extra_tensor_names_it)
{
    vit_model *m = tiny(8, 5);
    char err[256];
    int nt = model_num_tensors(m);
    float *params;
    st_tensor *ts = tensors_of(m, &params);
    /* without head.bias (the last tensor) */
    cr_assert_eq(st_write(path, ts, nt - 1, NULL, 0, err, sizeof err), 0, "%s", err);
    expect_load_error(m, "tensor 'head.bias' is missing", NULL);
    /* with an extra tensor */
    float extra = 1;
    ts[nt] = (st_tensor){"fc_norm.weight", ST_F32, 1, {1}, &extra};
    cr_assert_eq(st_write(path, ts, nt + 1, NULL, 0, err, sizeof err), 0, "%s", err);
    expect_load_error(m, "tensor 'fc_norm.weight' is not part of this model", NULL);
    free(ts);
    free(params);
    model_free(m);
}

Test(model_io, a_bf16_tensor_is_refused_naming_it_its_dtype_and_the_dtype_the_model_needs)
{
    vit_model *m = tiny(8, 5);
    char err[256];
    int nt = model_num_tensors(m), q = index_of(m, "blocks.0.attn.qkv.weight");
    cr_assert(q < nt - 1, "the BF16 tensor should not be the last");
    float *params;
    st_tensor *ts = tensors_of(m, &params);
    /* the same shape in BF16: half the bytes (the upper halves of the floats) */
    size_t numel = model_tensor_at(m, q)->numel;
    uint16_t *bf = malloc(numel * sizeof *bf);
    cr_assert_not_null(bf);
    for (size_t k = 0; k < numel; k++) {
        uint32_t bits;
        memcpy(&bits, (const float *)ts[q].data + k, 4);
        bf[k] = (uint16_t)(bits >> 16);
    }
    ts[q].dtype = ST_BF16;
    ts[q].data = bf;
    cr_assert_eq(st_write(path, ts, nt, NULL, 0, err, sizeof err), 0, "%s", err);
    model_init_random(m, 9);
    expect_load_error(m, "tensor 'blocks.0.attn.qkv.weight' is BF16, the model needs F32", NULL);
    free(bf);
    free(ts);
    free(params);
    model_free(m);
}

Test(model_io, nan_or_inf_in_loaded_weights_is_refused_naming_the_tensor_and_element)
{
    vit_model *m = tiny(8, 5);
    char err[256];
    int nt = model_num_tensors(m), q = index_of(m, "blocks.0.attn.qkv.weight");
    float *params;
    st_tensor *ts = tensors_of(m, &params);
    float *w = params + model_tensor_at(m, q)->offset;
    w[17] = NAN;
    w[20] = INFINITY;
    cr_assert_eq(st_write(path, ts, nt, NULL, 0, err, sizeof err), 0, "%s", err);
    model_init_random(m, 9);
    expect_load_error(m, "tensor 'blocks.0.attn.qkv.weight' holds NaN at element 17", NULL);
    w[17] = 0;
    cr_assert_eq(st_write(path, ts, nt, NULL, 0, err, sizeof err), 0, "%s", err);
    expect_load_error(m, "tensor 'blocks.0.attn.qkv.weight' holds Inf at element 20", NULL);
    w[20] = 0;
    int h = index_of(m, "head.bias");
    params[model_tensor_at(m, h)->offset] = -INFINITY;
    cr_assert_eq(st_write(path, ts, nt, NULL, 0, err, sizeof err), 0, "%s", err);
    expect_load_error(m, "tensor 'head.bias' holds -Inf at element 0", NULL);
    /* the largest finite values load */
    params[model_tensor_at(m, h)->offset] = -3.4028235e38f;
    w[0] = 3.4028235e38f;
    cr_assert_eq(st_write(path, ts, nt, NULL, 0, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_load_safetensors(m, path, err, sizeof err), 0, "%s", err);
    free(ts);
    free(params);
    model_free(m);
}

/* The model's tensors with head.bias given twice: written as head.bia@ (the
 * same length), then renamed in the file, so that both ranges fit. */
Test(model_io, a_header_naming_a_tensor_twice_is_refused_even_when_the_ranges_look_fine)
{
    vit_model *m = tiny(8, 5);
    char err[256];
    int nt = model_num_tensors(m), h = index_of(m, "head.bias");
    float *params;
    st_tensor *ts = tensors_of(m, &params);
    ts[nt] = ts[h];
    ts[nt].name = "head.bia@";
    cr_assert_eq(st_write(path, ts, nt + 1, NULL, 0, err, sizeof err), 0, "%s", err);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    char head[8192];
    size_t got = fread(head, 1, sizeof head - 1, f);
    head[got] = 0;
    char *at = NULL;
    for (size_t i = 0; !at && i + 11 <= got; i++)
        if (memcmp(head + i, "\"head.bia@\"", 11) == 0) at = head + i;
    cr_assert_not_null(at);
    cr_assert_eq(fseek(f, at - head + 9, SEEK_SET), 0);
    fputc('s', f);
    cr_assert_eq(fclose(f), 0);
    model_init_random(m, 9);
    expect_load_error(m, "tensor 'head.bias' is named twice", NULL);
    free(ts);
    free(params);
    model_free(m);
}

Test(model_io, a_directory_given_as_model_init_is_refused_as_one)
{
    vit_model *m = tiny(8, 5);
    snprintf(path, sizeof path, "%s", dir);
    expect_load_error(m, "is a directory, not a regular file", NULL);
    model_free(m);
}

/* ---- adaptations (model_load_tensors with options) ---- */

static vit_model *sized(int image, int patch, int classes, uint64_t seed)
{
    model_config mc = tiny_mc;
    mc.image_size = image;
    mc.patch_size = patch;
    mc.num_classes = classes;
    vit_model *m;
    char err[256];
    cr_assert_eq(model_new(&m, &mc, 2, NULL, ops_cpu(), err, sizeof err), 0, "%s", err);
    model_init_random(m, seed);
    return m;
}

/* Loads the file at path with options o: the return code, the message in err. */
static int load_with(vit_model *m, const model_load_options *o, char *err, size_t errlen)
{
    st_file *f = NULL;
    cr_assert_eq(st_open(&f, path, err, errlen), 0, "%s", err);
    int n = st_count(f);
    st_tensor *ts = calloc((size_t)n, sizeof *ts);
    cr_assert_not_null(ts);
    for (int i = 0; i < n; i++) ts[i] = *st_at(f, i);
    int rc = model_load_tensors(m, ts, n, path, o, err, errlen);
    free(ts);
    st_close(f);
    return rc;
}

static void save(vit_model *m, int image, int patch, int classes)
{
    model_config mc = tiny_mc;
    mc.image_size = image;
    mc.patch_size = patch;
    mc.num_classes = classes;
    char err[256];
    cr_assert_eq(model_save_safetensors(m, &mc, path, err, sizeof err), 0, "%s", err);
}

static const float *tensor(vit_model *m, const char *name)
{
    return model_params(m) + model_tensor_at(m, index_of(m, name))->offset;
}

/* every tensor of a but the ones named in skip equals b's */
static void same_but(vit_model *a, vit_model *b, const char *skip1, const char *skip2)
{
    for (int i = 0; i < model_num_tensors(a); i++) {
        const model_tensor *t = model_tensor_at(a, i);
        if ((skip1 && strcmp(t->name, skip1) == 0) || (skip2 && strcmp(t->name, skip2) == 0))
            continue;
        cr_assert(memcmp(tensor(a, t->name), tensor(b, t->name), t->numel * sizeof(float)) == 0,
                  "tensor %s differs", t->name);
    }
}

Test(model_io, a_head_of_another_class_count_is_new_timm_init_from_the_seed_the_rest_loaded)
{
    vit_model *src = sized(8, 4, 10, 5), *dst = sized(8, 4, 5, 6), *again = sized(8, 4, 5, 7);
    save(src, 8, 4, 10);
    char err[512] = "";
    model_load_options o = {.head = INIT_HEAD_NEW, .seed = 42};
    cr_assert_eq(load_with(dst, &o, err, sizeof err), 0, "%s", err);
    same_but(src, dst, "head.weight", "head.bias");
    const float *w = tensor(dst, "head.weight"), *b = tensor(dst, "head.bias");
    double sq = 0;
    for (int i = 0; i < 5 * 8; i++) sq += (double)w[i] * w[i];
    double sd = sqrt(sq / 40);
    cr_assert(sd > 0.01 && sd < 0.03, "head weight std %.4f, timm's 0.02", sd);
    for (int k = 0; k < 5; k++) cr_assert_eq(b[k], 0.0f, "head bias %d", k);
    /* the same as model_new_head_init with the seed: deterministic */
    float ww[40], bb[5];
    model_new_head_init(ww, bb, 5, 8, 42);
    cr_assert(memcmp(ww, w, sizeof ww) == 0);
    cr_assert_eq(load_with(again, &o, err, sizeof err), 0, "%s", err);
    cr_assert(memcmp(tensor(again, "head.weight"), w, sizeof ww) == 0, "same seed, same head");
    model_load_options o2 = {.head = INIT_HEAD_NEW, .seed = 43};
    cr_assert_eq(load_with(again, &o2, err, sizeof err), 0, "%s", err);
    cr_assert(memcmp(tensor(again, "head.weight"), w, sizeof ww) != 0, "another seed, another head");
    model_free(src);
    model_free(dst);
    model_free(again);
}

Test(model_io, initHead_keep_refuses_another_class_count_naming_the_key_both_counts_and_the_file)
{
    vit_model *src = sized(8, 4, 10, 5), *dst = sized(8, 4, 5, 6);
    save(src, 8, 4, 10);
    size_t n = model_num_params(dst);
    float *before = malloc(n * sizeof(float));
    cr_assert_not_null(before);
    memcpy(before, model_params(dst), n * sizeof(float));
    char err[512] = "";
    model_load_options o = {.head = INIT_HEAD_KEEP, .seed = 1};
    cr_assert_eq(load_with(dst, &o, err, sizeof err), -1);
    cr_assert(strstr(err, path) && strstr(err, "model.initHead=keep") &&
              strstr(err, "head.weight has 10 classes") && strstr(err, "model.numClasses=5"),
              "%s", err);
    cr_assert(memcmp(before, model_params(dst), n * sizeof(float)) == 0, "the model changed");
    /* the same count loads under keep */
    vit_model *same = sized(8, 4, 10, 9);
    cr_assert_eq(load_with(same, &o, err, sizeof err), 0, "%s", err);
    same_but(src, same, NULL, NULL);
    free(before);
    model_free(src);
    model_free(dst);
    model_free(same);
}

Test(model_io, a_file_without_a_head_gets_a_new_one_or_is_refused_under_keep)
{
    vit_model *src = sized(8, 4, 3, 5), *dst = sized(8, 4, 3, 6);
    int nt = model_num_tensors(src);
    float *params;
    st_tensor *ts = tensors_of(src, &params);
    char err[512] = "";
    /* head.weight and head.bias are the last two tensors */
    cr_assert_str_eq(ts[nt - 2].name, "head.weight");
    cr_assert_eq(st_write(path, ts, nt - 2, NULL, 0, err, sizeof err), 0, "%s", err);
    model_load_options keep = {.head = INIT_HEAD_KEEP, .seed = 3};
    cr_assert_eq(load_with(dst, &keep, err, sizeof err), -1);
    cr_assert(strstr(err, "has no head") && strstr(err, "model.initHead=keep") &&
              strstr(err, "model.numClasses=3") && strstr(err, path), "%s", err);
    model_load_options o = {.head = INIT_HEAD_NEW, .seed = 3};
    cr_assert_eq(load_with(dst, &o, err, sizeof err), 0, "%s", err);
    same_but(src, dst, "head.weight", "head.bias");
    float ww[24], bb[3];
    model_new_head_init(ww, bb, 3, 8, 3);
    cr_assert(memcmp(ww, tensor(dst, "head.weight"), sizeof ww) == 0);
    free(ts);
    free(params);
    model_free(src);
    model_free(dst);
}

Test(model_io, pos_embed_of_another_grid_is_resampled_the_class_token_kept_the_rest_loaded)
{
    /* 8x8 images of 4x4 patches (a 2x2 grid) into 12x12 (3x3) */
    vit_model *src = sized(8, 4, 3, 5), *dst = sized(12, 4, 3, 6);
    save(src, 8, 4, 3);
    char err[512] = "";
    model_load_options o = {.head = INIT_HEAD_KEEP, .seed = 1};
    cr_assert_eq(load_with(dst, &o, err, sizeof err), 0, "%s", err);
    same_but(src, dst, "pos_embed", NULL);
    const float *sp = tensor(src, "pos_embed"), *dp = tensor(dst, "pos_embed");
    cr_assert(memcmp(sp, dp, 8 * sizeof(float)) == 0, "the class token is kept as it is");
    float want[9 * 8];
    cr_assert_eq(pos_resample_bicubic_aa(sp + 8, 2, 2, 8, want, 3, 3), 0);
    cr_assert(memcmp(want, dp + 8, sizeof want) == 0, "the grid is resampled 2x2 -> 3x3");
    /* down again: 12x12 -> 8x8 */
    save(dst, 12, 4, 3);
    vit_model *back = sized(8, 4, 3, 7);
    cr_assert_eq(load_with(back, &o, err, sizeof err), 0, "%s", err);
    float down[4 * 8];
    cr_assert_eq(pos_resample_bicubic_aa(dp + 8, 3, 3, 8, down, 2, 2), 0);
    cr_assert(memcmp(down, tensor(back, "pos_embed") + 8, sizeof down) == 0);
    model_free(src);
    model_free(dst);
    model_free(back);
}

Test(model_io, without_options_a_new_head_or_grid_stays_a_shape_error)
{
    vit_model *src = sized(8, 4, 10, 5), *dst = sized(8, 4, 5, 6), *big = sized(12, 4, 10, 6);
    save(src, 8, 4, 10);
    expect_load_error(dst, "tensor 'head.weight' has shape [10,8], the model needs [5,8]", NULL);
    expect_load_error(big, "tensor 'pos_embed' has shape [1,5,8], the model needs [1,10,8]", NULL);
    model_free(src);
    model_free(dst);
    model_free(big);
}

Test(model_io, a_pos_embed_that_is_not_a_class_token_and_a_square_grid_is_refused_naming_it)
{
    vit_model *src = sized(8, 4, 3, 5), *dst = sized(12, 4, 3, 6);
    int nt = model_num_tensors(src);
    float *params;
    st_tensor *ts = tensors_of(src, &params);
    cr_assert_str_eq(ts[1].name, "pos_embed");
    ts[1].shape[1] = 4; /* 1 + 3 tokens: the first 4 of the 5 */
    char err[512] = "";
    cr_assert_eq(st_write(path, ts, nt, NULL, 0, err, sizeof err), 0, "%s", err);
    model_load_options o = {.head = INIT_HEAD_NEW, .seed = 1};
    cr_assert_eq(load_with(dst, &o, err, sizeof err), -1);
    cr_assert(strstr(err, "'pos_embed' has 4 tokens") && strstr(err, "10 tokens") &&
              strstr(err, path), "%s", err);
    free(ts);
    free(params);
    model_free(src);
    model_free(dst);
}

Test(model_io, another_patch_size_is_refused_naming_both_sizes_and_the_file)
{
    /* 8x8 images: 4x4 patches in the file, 2x2 in the model */
    vit_model *src = sized(8, 4, 3, 5), *dst = sized(8, 2, 3, 6);
    save(src, 8, 4, 3);
    size_t n = model_num_params(dst);
    float *before = malloc(n * sizeof(float));
    cr_assert_not_null(before);
    memcpy(before, model_params(dst), n * sizeof(float));
    char err[512] = "";
    model_load_options o = {.head = INIT_HEAD_NEW, .seed = 1};
    cr_assert_eq(load_with(dst, &o, err, sizeof err), -1);
    cr_assert(strstr(err, path) && strstr(err, "patch size 4x4") &&
              strstr(err, "model.patchSize=2"), "%s", err);
    cr_assert(memcmp(before, model_params(dst), n * sizeof(float)) == 0, "the model changed");
    free(before);
    model_free(src);
    model_free(dst);
}
