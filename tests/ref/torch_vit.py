"""tests/ref/torch_vit.py - the PyTorch reference ViT and its training recipe.

Owns, for the reference checks and the PyTorch benchmark peer:
  * VisionTransformer: timm's VisionTransformer architecture exactly
    (class-token pooling, learned pos_embed over 1+N positions, pre-norm
    blocks, LayerNorm eps 1e-6, exact-erf GELU, no dropout, no layer scale),
    with timm's parameter names, so a state_dict moves between timm, this
    module and the C worker's exported safetensors unchanged; optionally
    timm's stochastic depth (drop_path_rate: DropPath on both residual
    branches of every block, rates torch.linspace(0, rate, depth)), whose
    masks a check can fix (set_drop_path_masks).
  * drop_path / DropPath: timm.layers.drop_path (scale_by_keep=True), with
    an optional fixed keep mask instead of the Bernoulli draw.
  * label_smoothing_cross_entropy, soft_target_cross_entropy: timm's
    LabelSmoothingCrossEntropy and SoftTargetCrossEntropy (batch means).
  * param_groups_weight_decay: timm's AdamW parameter groups.
  * lr_at: the learning-rate schedule of docs/design.md (linear warmup, cosine).
  * clip_grad_norm: torch.nn.utils.clip_grad_norm_ (the C side mirrors it).
  * load_fashion_mnist: Debian's gzipped IDX files -> normalized float32.

Shapes in comments: B batch, C channels, S image size, P patch size,
N = (S/P)^2 patches, T = 1 + N tokens, D dim, H mlp hidden, K classes.
Uses only torch and the standard library.
"""

import gzip
import math
import os
import struct

import torch
import torch.nn as nn

LN_EPS = 1e-6
FMNIST_DIR = "/usr/share/datasets/fashion-mnist"
FMNIST_MEAN = 0.2860
FMNIST_STD = 0.3530


def mlp_hidden(dim, mlp_ratio):
    """MLP hidden width. timm uses int(dim * mlp_ratio); the C side uses
    round(). They agree whenever dim * mlp_ratio is an integer, which is the
    case for every preset and every shape the reference checks use."""
    return int(round(dim * mlp_ratio))


class PatchEmbed(nn.Module):
    """x (B,C,S,S) -> (B,N,D): Conv2d(C, D, P, stride P), flatten, transpose."""

    def __init__(self, img_size, patch_size, in_chans, embed_dim):
        super().__init__()
        assert img_size % patch_size == 0, "imageSize must be a multiple of patchSize"
        self.img_size = img_size
        self.patch_size = patch_size
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        x = self.proj(x)                     # (B,D,S/P,S/P)
        return x.flatten(2).transpose(1, 2)  # (B,N,D)


class Attention(nn.Module):
    """x (B,T,D) -> (B,T,D): multi-head self-attention over all tokens."""

    def __init__(self, dim, num_heads):
        super().__init__()
        assert dim % num_heads == 0, "dim must be a multiple of heads"
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, D = x.shape
        qkv = self.qkv(x).reshape(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)              # each (B,NH,T,hd)
        attn = (q * self.scale) @ k.transpose(-2, -1)  # (B,NH,T,T)
        attn = attn.softmax(dim=-1)
        x = attn @ v                         # (B,NH,T,hd)
        x = x.transpose(1, 2).reshape(B, T, D)
        return self.proj(x)


class Mlp(nn.Module):
    """x (B,T,D) -> (B,T,D): fc1 (D->H), exact GELU, fc2 (H->D)."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()  # approximate='none': the erf form, as timm
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def drop_path(x, drop_prob, training, keep_mask=None):
    """timm.layers.drop_path with scale_by_keep=True: in training, each
    sample's x (dim 0) is zeroed with probability drop_prob and the kept
    ones are divided by keep_prob = 1 - drop_prob. keep_mask (B,) of 0/1,
    when given, replaces the Bernoulli(keep_prob) draw."""
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    if keep_mask is None:
        random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    else:
        random_tensor = keep_mask.to(x.dtype).reshape(shape).clone()
    if keep_prob > 0.0:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    """timm.layers.DropPath; keep_mask (B,) fixes the next draws (None: drawn)."""

    def __init__(self, drop_prob=0.0):
        super().__init__()
        self.drop_prob = drop_prob
        self.keep_mask = None

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training, self.keep_mask)


class Block(nn.Module):
    """Pre-norm transformer block: x + drop_path1(attn(norm1(x))), then
    x + drop_path2(mlp(norm2(x))) (timm: Identity where the rate is 0)."""

    def __init__(self, dim, num_heads, mlp_ratio, drop_path=0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=LN_EPS)
        self.attn = Attention(dim, num_heads)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.mlp = Mlp(dim, mlp_hidden(dim, mlp_ratio))
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x):
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        x = x + self.drop_path2(self.mlp(self.norm2(x)))
        return x


class VisionTransformer(nn.Module):
    """timm.models.vision_transformer.VisionTransformer with class-token
    pooling, no dropout, no layer scale: images (B,C,S,S) -> logits (B,K)."""

    def __init__(self, img_size=28, patch_size=7, in_chans=1, num_classes=10,
                 embed_dim=64, depth=4, num_heads=4, mlp_ratio=4.0, drop_path_rate=0.0):
        super().__init__()
        self.num_classes = num_classes
        self.embed_dim = embed_dim
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        n = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + n, embed_dim))
        # stochastic depth decay rule, as timm's
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads, mlp_ratio, dpr[i])
                                      for i in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=LN_EPS)
        self.head = nn.Linear(embed_dim, num_classes)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """timm's default weight_init='' scheme: trunc-normal(.02) pos_embed
        and Linear weights, zero Linear biases, cls_token normal(1e-6),
        LayerNorm ones/zeros, the patch Conv2d left at PyTorch's default."""
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def set_drop_path_masks(self, keep):
        """Fixes drop path's masks: keep (depth, 2, B) of 0/1, [l, 0] for
        block l's attention branch and [l, 1] for its MLP branch (the C
        side's layout); None: drawn again. Blocks of rate 0 ignore theirs."""
        for i, blk in enumerate(self.blocks):
            for j, dp in enumerate((blk.drop_path1, blk.drop_path2)):
                if isinstance(dp, DropPath):
                    dp.keep_mask = None if keep is None else keep[i, j]

    def no_weight_decay(self):
        return {"pos_embed", "cls_token", "dist_token"}

    def forward_features(self, x):
        x = self.patch_embed(x)                                      # (B,N,D)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)  # (B,T,D)
        x = x + self.pos_embed
        x = self.blocks(x)
        return self.norm(x)                                          # (B,T,D)

    def forward(self, x):
        x = self.forward_features(x)
        return self.head(x[:, 0])                                    # (B,K)


def build_vit(image, patch, chans, dim, depth, heads, mlp_ratio, classes, drop_path_rate=0.0):
    """VisionTransformer from the C config's model keys (and training.dropPath)."""
    return VisionTransformer(img_size=image, patch_size=patch, in_chans=chans,
                             num_classes=classes, embed_dim=dim, depth=depth,
                             num_heads=heads, mlp_ratio=mlp_ratio,
                             drop_path_rate=drop_path_rate)


def label_smoothing_cross_entropy(logits, target, smoothing):
    """timm.loss.LabelSmoothingCrossEntropy: (1 - s) x NLL of the label
    + s x the mean over classes of -log p, averaged over the batch."""
    logprobs = torch.nn.functional.log_softmax(logits, dim=-1)
    nll_loss = -logprobs.gather(dim=-1, index=target.unsqueeze(1)).squeeze(1)
    smooth_loss = -logprobs.mean(dim=-1)
    loss = (1.0 - smoothing) * nll_loss + smoothing * smooth_loss
    return loss.mean()


def soft_target_cross_entropy(logits, target):
    """timm.loss.SoftTargetCrossEntropy: -sum_k t_k log p_k, averaged over
    the batch; target (B,K), one distribution per row."""
    loss = torch.sum(-target * torch.nn.functional.log_softmax(logits, dim=-1), dim=-1)
    return loss.mean()


def param_groups_weight_decay(model, weight_decay):
    """timm.optim.param_groups_weight_decay: no decay for 1-D params, biases
    and the model's no_weight_decay() names (pos_embed, cls_token)."""
    skip = model.no_weight_decay() if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim <= 1 or name.endswith(".bias") or name in skip:
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": no_decay, "weight_decay": 0.0},
            {"params": decay, "weight_decay": weight_decay}]


def lr_at(step, base_lr, warmup, total, schedule, min_lr):
    """Learning rate of 0-based optimizer step `step`: linear warmup over
    `warmup` steps to base_lr, then cosine to min_lr at `total` (or constant)."""
    if step < warmup:
        return base_lr * (step + 1) / warmup
    if schedule == "cosine":
        t = (step - warmup) / max(1, total - warmup)
        return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + math.cos(math.pi * t))
    return base_lr


def clip_grad_norm(params, max_norm):
    """torch.nn.utils.clip_grad_norm_ (L2, coef = max_norm/(norm+1e-6)
    clamped to 1). Returns the global norm before clipping."""
    return torch.nn.utils.clip_grad_norm_(params, max_norm)


def _read_idx(path, want_magic):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = struct.unpack(">I", raw[:4])[0]
    if magic != want_magic:
        raise ValueError("%s: IDX magic 0x%08x, expected 0x%08x" % (path, magic, want_magic))
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    body = raw[4 + 4 * ndim:]
    count = 1
    for d in dims:
        count *= d
    if len(body) != count:
        raise ValueError("%s: %d data bytes, header says %d" % (path, len(body), count))
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(dims)


def load_fashion_mnist(split="train", root=FMNIST_DIR):
    """Fashion-MNIST from Debian's gzipped IDX files.

    Returns (images float32 (N,1,28,28) normalized as (x/255 - 0.2860)/0.3530,
    labels int64 (N,)); split is "train" (60000) or "test" (10000)."""
    prefix = {"train": "train", "test": "t10k"}[split]
    images = _read_idx(os.path.join(root, prefix + "-images-idx3-ubyte.gz"), 0x00000803)
    labels = _read_idx(os.path.join(root, prefix + "-labels-idx1-ubyte.gz"), 0x00000801)
    if images.shape[0] != labels.shape[0]:
        raise ValueError("fashion-mnist %s: %d images but %d labels"
                         % (split, images.shape[0], labels.shape[0]))
    x = images.to(torch.float32).div_(255.0).sub_(FMNIST_MEAN).div_(FMNIST_STD)
    return x.unsqueeze(1).contiguous(), labels.to(torch.int64)
