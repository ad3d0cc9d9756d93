/* tests/test_model_init.c - worker/train/model_init.c: model.init resolved to
 * weights: a path and a file:// URI of a safetensors file; a checkpoint's
 * root (its newest complete step) and one step-N folder, as a directory or
 * a file:// URI, whose manifest's model (another class count and image
 * size here) gives the tensors that are then adapted (a new head, a
 * resampled pos_embed); a directory with no checkpoint and a missing file
 * are refused as init_weights errors naming model.init. (S3 is covered by
 * tests/finetune.bats against moto.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_store.h"
#include "model.h"
#include "model_init.h"
#include "model_io.h"
#include "pos_resample.h"

static char dir[64];

static void mk(void)
{
    snprintf(dir, sizeof dir, "/tmp/vitjob-minit-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void rm(void)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(model_init, .init = mk, .fini = rm, .timeout = 60);

static model_config mc_of(int image, int classes)
{
    model_config mc = {.image_size = image, .patch_size = 4, .channels = 1, .dim = 8,
                       .depth = 1, .heads = 2, .mlp_ratio = 2.0, .num_classes = classes};
    return mc;
}

static vit_model *model(int image, int classes, uint64_t seed)
{
    model_config mc = mc_of(image, classes);
    vit_model *m;
    char err[256];
    cr_assert_eq(model_new(&m, &mc, 2, NULL, ops_cpu(), err, sizeof err), 0, "%s", err);
    model_init_random(m, seed);
    return m;
}

/* a checkpoint of m (config mc) at step under dir/ck */
static void checkpoint(vit_model *m, const model_config *mc, long step)
{
    char uri[128], err[512];
    snprintf(uri, sizeof uri, "file://%s/ck", dir);
    ckpt_store *s = NULL;
    ckpt_writer *w = NULL;
    cr_assert_eq(ckpt_store_open(&s, uri, "", err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_writer_new(&w, s, NULL, 0, 1, 5, 10, err, sizeof err), 0, "%s", err);
    size_t n = model_num_params(m);
    float *zeros = calloc(n, sizeof(float));
    cr_assert_not_null(zeros);
    ckpt_meta meta = {.step = step, .world_size = 1, .n_params = n};
    snprintf(meta.sharding, sizeof meta.sharding, "none");
    model_config_json(mc, meta.model, sizeof meta.model);
    ckpt_segment seg = {.lo = 0, .hi = n, .params = model_params(m), .m = zeros, .v = zeros};
    cr_assert_eq(ckpt_save(w, &meta, &seg, 1, ops_cpu(), err, sizeof err), CKPT_OK, "%s", err);
    cr_assert_eq(ckpt_wait(w, NULL, err, sizeof err), CKPT_OK, "%s", err);
    ckpt_writer_free(w);
    ckpt_store_free(s);
    free(zeros);
}

static const float *tensor(vit_model *m, const char *name)
{
    int i = model_find_tensor(m, name);
    cr_assert(i >= 0, "%s", name);
    return model_params(m) + model_tensor_at(m, i)->offset;
}

static size_t numel(vit_model *m, const char *name)
{
    return model_tensor_at(m, model_find_tensor(m, name))->numel;
}

static vj_err init_from(vit_model *m, const char *uri, char *err, size_t errlen)
{
    model_init_options o = {.uri = uri, .endpoint = "",
                            .load = {.head = INIT_HEAD_NEW, .seed = 11}};
    return model_init_load(m, &o, err, errlen);
}

Test(model_init, a_path_and_a_file_uri_of_a_safetensors_file_load_it)
{
    vit_model *src = model(8, 3, 1), *a = model(8, 3, 2), *b = model(8, 3, 3);
    model_config mc = mc_of(8, 3);
    char path[128], uri[160], err[512] = "";
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    snprintf(uri, sizeof uri, "file://%s", path);
    cr_assert_eq(model_save_safetensors(src, &mc, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(init_from(a, path, err, sizeof err), VJ_OK, "%s", err);
    cr_assert_eq(init_from(b, uri, err, sizeof err), VJ_OK, "%s", err);
    size_t n = model_num_params(src) * sizeof(float);
    cr_assert(memcmp(model_params(src), model_params(a), n) == 0);
    cr_assert(memcmp(model_params(src), model_params(b), n) == 0);
    model_free(src);
    model_free(a);
    model_free(b);
}

Test(model_init, a_checkpoint_root_gives_its_newest_step_and_a_step_folder_that_step_adapted)
{
    /* pretrained: 8x8 images (2x2 grid), 10 classes; finetuned: 12x12 (3x3), 4 classes */
    model_config mc = mc_of(8, 10);
    vit_model *s10 = model(8, 10, 1), *s20 = model(8, 10, 2);
    checkpoint(s10, &mc, 10);
    checkpoint(s20, &mc, 20);
    vit_model *ft = model(12, 4, 3);
    char root[128], step[160], err[512] = "";
    snprintf(root, sizeof root, "%s/ck", dir);
    cr_assert_eq(init_from(ft, root, err, sizeof err), VJ_OK, "%s", err);
    cr_assert(memcmp(tensor(ft, "blocks.0.attn.qkv.weight"), tensor(s20, "blocks.0.attn.qkv.weight"),
                     numel(ft, "blocks.0.attn.qkv.weight") * sizeof(float)) == 0,
              "the root gives the newest step, 20");
    float want[9 * 8];
    cr_assert_eq(pos_resample_bicubic_aa(tensor(s20, "pos_embed") + 8, 2, 2, 8, want, 3, 3), 0);
    cr_assert(memcmp(tensor(ft, "pos_embed") + 8, want, sizeof want) == 0, "resampled grid");
    float hw[4 * 8], hb[4];
    model_new_head_init(hw, hb, 4, 8, 11);
    cr_assert(memcmp(tensor(ft, "head.weight"), hw, sizeof hw) == 0, "a new head");
    /* a step folder, as a file:// URI */
    snprintf(step, sizeof step, "file://%s/ck/step-000000010/", dir);
    cr_assert_eq(init_from(ft, step, err, sizeof err), VJ_OK, "%s", err);
    cr_assert(memcmp(tensor(ft, "norm.weight"), tensor(s10, "norm.weight"),
                     numel(ft, "norm.weight") * sizeof(float)) == 0, "step-000000010's weights");
    cr_assert(memcmp(tensor(ft, "blocks.0.mlp.fc1.weight"), tensor(s10, "blocks.0.mlp.fc1.weight"),
                     numel(ft, "blocks.0.mlp.fc1.weight") * sizeof(float)) == 0);
    model_free(s10);
    model_free(s20);
    model_free(ft);
}

Test(model_init, a_checkpoint_of_another_patch_size_is_refused_naming_the_step_and_both_sizes)
{
    model_config mc = mc_of(8, 3);
    mc.patch_size = 2;
    vit_model *src, *dst = model(8, 3, 2);
    char err[512] = "", root[128];
    cr_assert_eq(model_new(&src, &mc, 1, NULL, ops_cpu(), err, sizeof err), 0, "%s", err);
    model_init_random(src, 1);
    checkpoint(src, &mc, 7);
    snprintf(root, sizeof root, "%s/ck", dir);
    cr_assert_eq(init_from(dst, root, err, sizeof err), VJ_ERR_INIT_WEIGHTS);
    cr_assert(strstr(err, "model.init=") && strstr(err, "step-000000007") &&
              strstr(err, "patch size 2x2") && strstr(err, "model.patchSize=4"), "%s", err);
    model_free(src);
    model_free(dst);
}

Test(model_init, a_directory_without_a_checkpoint_or_a_missing_file_is_an_init_weights_error)
{
    vit_model *m = model(8, 3, 1);
    char err[512] = "", missing[128];
    cr_assert_eq(init_from(m, dir, err, sizeof err), VJ_ERR_INIT_WEIGHTS);
    cr_assert(strstr(err, dir) && strstr(err, "is a directory, not a regular file") &&
              strstr(err, "no complete checkpoint"), "%s", err);
    snprintf(missing, sizeof missing, "%s/none.safetensors", dir);
    cr_assert_eq(init_from(m, missing, err, sizeof err), VJ_ERR_INIT_WEIGHTS);
    cr_assert(strstr(err, missing), "%s", err);
    model_free(m);
}
