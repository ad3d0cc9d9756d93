/* tests/test_safetensors.c - the safetensors reader and writer, and the
 * model's weights by timm name: round trips are exact, and every kind of bad
 * file (short, lying header, offsets outside the data, wrong dtype, missing,
 * extra or mis-shaped tensors) is an error naming the file and the tensor,
 * never a crash. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "model_io.h"
#include "safetensors.h"

static char path[64];

static void mk(void)
{
    snprintf(path, sizeof path, "/tmp/vitjob-st-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
}

static void rm(void) { unlink(path); }

TestSuite(safetensors, .init = mk, .fini = rm);

static void write_raw(const char *header, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    unsigned long long len = strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(len >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, len, f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static void expect_open_error(const char *needle)
{
    st_file *f = NULL;
    char err[512] = "";
    cr_assert_eq(st_open(&f, path, err, sizeof err), -1, "opened a bad file");
    cr_assert_null(f);
    cr_assert(strstr(err, path) && strstr(err, needle), "message: %s", err);
}

Test(safetensors, round_trip_keeps_names_shapes_dtypes_values_and_metadata)
{
    float a[6] = {1, -2, 3.5f, 4, 5, 6};
    int64_t b[3] = {7, -8, 1LL << 40};
    st_tensor ts[2] = {{"a.weight", ST_F32, 2, {2, 3}, a}, {"labels", ST_I64, 1, {3}, b}};
    const char *meta[] = {"format", "pt"};
    char err[256];
    cr_assert_eq(st_write(path, ts, 2, meta, 1, err, sizeof err), 0, "%s", err);
    st_file *f;
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st_count(f), 2);
    const st_tensor *ra = st_find(f, "a.weight"), *rb = st_find(f, "labels");
    cr_assert(ra && rb);
    cr_assert(ra->ndim == 2 && ra->shape[0] == 2 && ra->shape[1] == 3 && ra->dtype == ST_F32);
    cr_assert(memcmp(ra->data, a, sizeof a) == 0);
    cr_assert(memcmp(rb->data, b, sizeof b) == 0);
    cr_assert_str_eq(st_meta(f, "format"), "pt");
    cr_assert_null(st_find(f, "nope"));
    st_close(f);
}

Test(safetensors, a_file_shorter_than_its_length_prefix_is_refused)
{
    FILE *f = fopen(path, "wb");
    fputs("abc", f);
    fclose(f);
    expect_open_error("not a safetensors file");
}

Test(safetensors, a_header_length_beyond_the_file_is_refused)
{
    write_raw("{}", NULL, 0);
    FILE *f = fopen(path, "r+b");
    fputc(0xff, f); /* length 255 + ... for a 10-byte file */
    fclose(f);
    expect_open_error("exceeds the file");
}

Test(safetensors, offsets_outside_the_data_are_refused)
{
    float x[2] = {1, 2};
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", x, sizeof x);
    expect_open_error("'x'");
}

Test(safetensors, offsets_that_disagree_with_the_shape_are_refused)
{
    float x[4] = {1, 2, 3, 4};
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", x, sizeof x);
    expect_open_error("do not fit its shape");
}

Test(safetensors, unknown_dtype_and_malformed_entries_are_refused)
{
    float x[1] = {1};
    write_raw("{\"x\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", x, 1);
    expect_open_error("unsupported dtype F8");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", x, 4);
    expect_open_error("malformed header entry");
    write_raw("[1,2]", NULL, 0);
    expect_open_error("not a JSON object");
}

static vit_model *tiny(int dim)
{
    model_config mc = {.image_size = 8, .patch_size = 4, .channels = 1, .dim = dim, .depth = 1,
                       .heads = 2, .mlp_ratio = 2.0, .num_classes = 3};
    vit_model *m;
    char err[256];
    cr_assert_eq(model_new(&m, &mc, 2, NULL, ops_cpu(), err, sizeof err), 0);
    model_init_random(m, 5);
    return m;
}

Test(safetensors, model_weights_round_trip_exactly_by_timm_name)
{
    model_config mc = {.image_size = 8, .patch_size = 4, .channels = 1, .dim = 8, .depth = 1,
                       .heads = 2, .mlp_ratio = 2.0, .num_classes = 3};
    vit_model *a = tiny(8), *b = tiny(8);
    char err[256];
    model_init_random(b, 6);
    cr_assert_eq(model_save_safetensors(a, &mc, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_load_safetensors(b, path, err, sizeof err), 0, "%s", err);
    cr_assert(memcmp(model_params(a), model_params(b), model_num_params(a) * sizeof(float)) == 0);
    st_file *f;
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0);
    cr_assert_not_null(st_find(f, "blocks.0.attn.qkv.weight"));
    cr_assert_not_null(strstr(st_meta(f, "vitjob.model"), "\"dim\":8"));
    st_close(f);
    model_free(a);
    model_free(b);
}

Test(safetensors, loading_weights_of_another_shape_names_the_tensor_and_both_shapes)
{
    model_config mc = {.image_size = 8, .patch_size = 4, .channels = 1, .dim = 8, .depth = 1,
                       .heads = 2, .mlp_ratio = 2.0, .num_classes = 3};
    vit_model *a = tiny(8), *b = tiny(16);
    char err[256];
    cr_assert_eq(model_save_safetensors(a, &mc, path, err, sizeof err), 0);
    cr_assert_eq(model_load_safetensors(b, path, err, sizeof err), -1);
    cr_assert(strstr(err, "'cls_token'") && strstr(err, "[1,1,8]") && strstr(err, "[1,1,16]"),
              "%s", err);
    model_free(a);
    model_free(b);
}

Test(safetensors, loading_weights_with_a_missing_or_extra_tensor_names_it)
{
    vit_model *m = tiny(8);
    char err[256];
    int nt = model_num_tensors(m);
    st_tensor *ts = calloc((size_t)nt + 1, sizeof *ts);
    for (int i = 0; i < nt; i++) {
        const model_tensor *t = model_tensor_at(m, i);
        ts[i] = (st_tensor){t->name, ST_F32, t->ndim, {0}, model_params(m) + t->offset};
        for (int d = 0; d < t->ndim; d++) ts[i].shape[d] = t->shape[d];
    }
    /* without head.bias (the last tensor) */
    cr_assert_eq(st_write(path, ts, nt - 1, NULL, 0, err, sizeof err), 0);
    cr_assert_eq(model_load_safetensors(m, path, err, sizeof err), -1);
    cr_assert(strstr(err, "'head.bias' is missing"), "%s", err);
    /* with an extra tensor */
    float extra = 1;
    ts[nt] = (st_tensor){"fc_norm.weight", ST_F32, 1, {1}, &extra};
    cr_assert_eq(st_write(path, ts, nt + 1, NULL, 0, err, sizeof err), 0);
    cr_assert_eq(model_load_safetensors(m, path, err, sizeof err), -1);
    cr_assert(strstr(err, "'fc_norm.weight' is not part of this model"), "%s", err);
    free(ts);
    model_free(m);
}

Test(safetensors, shapes_that_wrap_the_element_count_or_fractional_offsets_are_refused)
{
    float x[1] = {1};
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
              "\"data_offsets\":[0,0]}}", x, 4);
    expect_open_error("'x'");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1e30],\"data_offsets\":[0,4]}}", x, 4);
    expect_open_error("bad shape");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4.5]}}", x, 4);
    expect_open_error("integers");
}
