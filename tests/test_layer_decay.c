/* tests/test_layer_decay.c - worker/train/layer_decay.c: timm's layer of each
 * ViT parameter (param_groups_layer_decay over VisionTransformer's
 * group_matcher: the stem layer 0, blocks.i layer i+1, the final norm merged
 * into the last block, the head last) and BEiT's scale decay^(layers-1-layer);
 * 0 is off. (tests/ref/finetune_torch.py checks the whole table against a
 * torch reference of timm's grouping.) */
#include <criterion/criterion.h>
#include <math.h>

#include "layer_decay.h"

TestSuite(layer_decay, .timeout = 60);

Test(layer_decay, stem_blocks_norm_and_head_get_timms_layer_ids)
{
    const int depth = 3;
    static const struct {
        const char *name;
        int layer;
    } want[] = {
        {"cls_token", 0},           {"pos_embed", 0},
        {"patch_embed.proj.weight", 0}, {"patch_embed.proj.bias", 0},
        {"blocks.0.norm1.weight", 1}, {"blocks.0.attn.qkv.weight", 1},
        {"blocks.1.mlp.fc2.bias", 2}, {"blocks.2.attn.proj.weight", 3},
        {"norm.weight", 3},         {"norm.bias", 3},
        {"head.weight", 4},         {"head.bias", 4},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_eq(layer_decay_layer(want[i].name, depth), want[i].layer, "%s: layer %d, want %d",
                     want[i].name, layer_decay_layer(want[i].name, depth), want[i].layer);
}

Test(layer_decay, the_scale_is_decay_to_the_layers_above_and_1_for_the_head)
{
    const int depth = 12;
    const double d = 0.75;
    cr_assert_float_eq(layer_decay_scale("head.weight", depth, d), 1.0, 1e-15);
    cr_assert_float_eq(layer_decay_scale("norm.bias", depth, d), 0.75, 1e-15);
    cr_assert_float_eq(layer_decay_scale("blocks.11.norm2.weight", depth, d), 0.75, 1e-15);
    cr_assert_float_eq(layer_decay_scale("blocks.0.mlp.fc1.weight", depth, d), pow(0.75, 12),
                       1e-15);
    cr_assert_float_eq(layer_decay_scale("pos_embed", depth, d), pow(0.75, 13), 1e-15);
    cr_assert_float_eq(layer_decay_scale("cls_token", depth, 0.0), 1.0, 0.0, "0 is off");
    cr_assert_float_eq(layer_decay_scale("pos_embed", depth, 0.0), 1.0, 0.0, "0 is off");
    cr_assert_float_eq(layer_decay_scale("pos_embed", depth, 1.0), 1.0, 0.0);
}

Test(layer_decay, the_depth_is_read_from_the_block_names)
{
    const char *names[] = {"cls_token", "blocks.0.norm1.weight", "blocks.9.norm1.weight",
                           "blocks.10.mlp.fc2.bias", "norm.weight", "head.bias"};
    cr_assert_eq(layer_decay_depth(names, 6), 11);
    cr_assert_eq(layer_decay_depth(names, 1), 0);
}
