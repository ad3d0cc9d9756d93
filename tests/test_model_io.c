/* tests/test_model_io.c - worker/train/model_io.c: the model's weights round trip
 * exactly by timm name, and a file given as model.init is refused, naming
 * the tensor, when a tensor is missing, extra, named twice, of another shape
 * or dtype, or holds a NaN or an Inf; a refused file leaves the model as it
 * was. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "model_io.h"
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
