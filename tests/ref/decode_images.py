#!/usr/bin/python3
"""tests/ref/decode_images.py OUTDIR - the images tests/test_decode.c decodes,
made here with PIL (Debian's python3-pil), and what PIL decodes them to.

Owns: for each case NAME, OUTDIR/NAME.jpg or NAME.png (the image) and
OUTDIR/NAME.ref: "W H\\n" then W*H*3 bytes, PIL's
Image.open(NAME).convert("RGB") (or, for a scaled case, after
Image.draft("RGB", size)). Must not: download anything; everything is made
from a fixed seed, so two runs write the same files.

PIL cannot write 16-bit RGB(A) or LA PNGs nor restart markers: those PNGs
come from the small writer below (PIL still decodes them for the
reference), and the restart-marker JPEG from a PIL JPEG through
`jpegtran -restart 1` (Debian's libjpeg-turbo-progs).
"""
import io
import random
import struct
import subprocess
import sys
import zlib

from PIL import Image

W, H = 67, 45  # odd: the chroma upsampling's edges


def pattern(w=W, h=H, seed=1):
    """smooth gradients plus noise and a few hard edges: something for the
    IDCT, the chroma upsampling and the entropy coder to do"""
    rnd = random.Random(seed)
    px = []
    for y in range(h):
        for x in range(w):
            r = (x * 255) // (w - 1)
            g = (y * 255) // (h - 1)
            b = 255 if (x // 8 + y // 8) % 2 else 0
            n = rnd.randrange(-40, 41)
            px.append(tuple(max(0, min(255, v + n)) for v in (r, g, (b + r) // 2)))
    im = Image.new("RGB", (w, h))
    im.putdata(px)
    return im


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png16(w, h, color_type, channels, seed):
    """a 16-bit PNG PIL cannot write: samples spread over 0..65535"""
    rnd = random.Random(seed)
    raw = bytearray()
    for y in range(h):
        raw.append(0)  # filter: none
        for x in range(w):
            for c in range(channels):
                v = (x * 65535 // (w - 1) + c * 20000 + rnd.randrange(0, 3000)) % 65536
                raw += struct.pack(">H", v)
    ihdr = struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
            png_chunk(b"IDAT", zlib.compress(bytes(raw))) + png_chunk(b"IEND", b""))


def save(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def write(out, name, ext, data, draft=None):
    with open(f"{out}/{name}.{ext}", "wb") as f:
        f.write(data)
    im = Image.open(io.BytesIO(data))
    if draft:
        im.draft("RGB", draft)
    rgb = im.convert("RGB")
    with open(f"{out}/{name}.ref", "wb") as f:
        f.write(f"{rgb.width} {rgb.height}\n".encode() + rgb.tobytes())


def main(out):
    rgb = pattern()
    # JPEG
    write(out, "jpeg_baseline_420", "jpg", save(rgb, "JPEG", quality=90))
    write(out, "jpeg_baseline_422", "jpg", save(rgb, "JPEG", quality=90, subsampling=1))
    write(out, "jpeg_baseline_444", "jpg", save(rgb, "JPEG", quality=95, subsampling=0))
    write(out, "jpeg_progressive", "jpg", save(rgb, "JPEG", quality=85, progressive=True))
    write(out, "jpeg_optimized", "jpg", save(rgb, "JPEG", quality=75, optimize=True))
    write(out, "jpeg_grayscale", "jpg", save(rgb.convert("L"), "JPEG", quality=90))
    cmyk = Image.merge("CMYK", [*rgb.split(), rgb.convert("L").point(lambda v: 255 - v)])
    write(out, "jpeg_cmyk", "jpg", save(cmyk, "JPEG", quality=90))
    base = save(rgb, "JPEG", quality=90)
    rst = subprocess.run(["jpegtran", "-restart", "1", "-copy", "all"], input=base,
                         capture_output=True, check=True).stdout
    markers = sum(rst.count(bytes([0xFF, 0xD0 + i])) for i in range(8))
    if markers == 0:
        sys.exit("jpegtran -restart 1 wrote no restart markers")
    write(out, "jpeg_restart", "jpg", rst)
    # scaled: PIL's draft picks 1/2, 1/4, 1/8 as TurboJPEG does for those sizes
    big = pattern(200, 120, seed=2)
    big_jpg = save(big, "JPEG", quality=90)
    write(out, "jpeg_scaled_full", "jpg", big_jpg)
    write(out, "jpeg_scaled_half", "jpg", big_jpg, draft=(100, 60))
    write(out, "jpeg_scaled_quarter", "jpg", big_jpg, draft=(50, 30))
    write(out, "jpeg_scaled_eighth", "jpg", big_jpg, draft=(25, 15))
    # regions (decode_opts.crop_*): larger than an iMCU many times over,
    # neither side a multiple of 16, every kind of JPEG the decoder reads
    reg = pattern(203, 131, seed=4)
    write(out, "jpeg_region_420", "jpg", save(reg, "JPEG", quality=90))
    write(out, "jpeg_region_422", "jpg", save(reg, "JPEG", quality=90, subsampling=1))
    write(out, "jpeg_region_444", "jpg", save(reg, "JPEG", quality=90, subsampling=0))
    write(out, "jpeg_region_progressive", "jpg", save(reg, "JPEG", quality=90, progressive=True))
    write(out, "jpeg_region_grayscale", "jpg", save(reg.convert("L"), "JPEG", quality=90))
    reg_cmyk = Image.merge("CMYK", [*reg.split(), reg.convert("L").point(lambda v: 255 - v)])
    write(out, "jpeg_region_cmyk", "jpg", save(reg_cmyk, "JPEG", quality=90))
    reg_rst = subprocess.run(["jpegtran", "-restart", "1", "-copy", "all"],
                             input=save(reg, "JPEG", quality=90), capture_output=True,
                             check=True).stdout
    write(out, "jpeg_region_restart", "jpg", reg_rst)
    # PNG
    write(out, "png_rgb8", "png", save(rgb, "PNG"))
    write(out, "png_gray8", "png", save(rgb.convert("L"), "PNG"))
    write(out, "png_gray1", "png", save(rgb.convert("1"), "PNG"))
    rgba = rgb.copy()
    rgba.putalpha(rgb.convert("L"))
    write(out, "png_rgba8", "png", save(rgba, "PNG"))
    write(out, "png_la8", "png", save(rgba.convert("LA"), "PNG"))
    pal = rgb.quantize(colors=200, method=Image.Quantize.MEDIANCUT)
    write(out, "png_palette", "png", save(pal, "PNG"))
    write(out, "png_palette_trns", "png", save(pal, "PNG", transparency=3))
    pal16 = rgb.quantize(colors=16, method=Image.Quantize.MEDIANCUT)
    write(out, "png_palette_4bit", "png", save(pal16, "PNG", bits=4))
    write(out, "png_rgb16", "png", png16(W, H, 2, 3, 3))
    write(out, "png_rgba16", "png", png16(W, H, 6, 4, 4))
    write(out, "png_la16", "png", png16(W, H, 4, 2, 5))
    # 16-bit grayscale: PIL clips it to 255 (see worker/data/decode.h); the
    # .ref is still PIL's, the test checks we differ from it only there
    g16 = png16(W, H, 0, 1, 6)
    write(out, "png_gray16", "png", g16)
    hi = bytes(v >> 8 for v in Image.open(io.BytesIO(g16)).getdata() for _ in range(3))
    with open(f"{out}/png_gray16_highbyte.ref", "wb") as f:
        f.write(f"{W} {H}\n".encode() + hi)


if __name__ == "__main__":
    main(sys.argv[1])
