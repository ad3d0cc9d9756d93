"""tests/ref/safetensors_io.py - read and write the safetensors format by hand.

Owns: the file format only (no model knowledge). Debian's Python has no
`safetensors` package, so this is a small, strict implementation of
https://github.com/huggingface/safetensors#format:

    8 bytes   N, unsigned little-endian 64-bit: length of the header
    N bytes   JSON header: {name: {"dtype": "F32", "shape": [..],
                                   "data_offsets": [begin, end]}, ...,
                            "__metadata__": {str: str}}   (optional)
              padded with spaces to a multiple of 8 bytes
    rest      raw little-endian tensor data; offsets are relative to here

Public API:
    save(path, tensors, metadata=None)   tensors: {name: torch.Tensor}
    load(path) -> {name: torch.Tensor}   (each tensor owns its memory)
    load_with_metadata(path) -> (tensors, metadata)

Uses only torch and the standard library.
"""

import ctypes
import json
import os
import struct
import sys

import torch

# safetensors dtype tag <-> torch dtype.
_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_TAGS = {v: k for k, v in _DTYPES.items()}

# Refuse absurd headers instead of trying to allocate them (same bound as the
# reference implementation).
_MAX_HEADER = 100 * 1024 * 1024

if sys.byteorder != "little":  # the raw data is little-endian; so is every host we run on
    raise ImportError("safetensors_io supports little-endian hosts only")


class SafetensorsError(ValueError):
    """A file that is not valid safetensors (bad header, offsets or sizes)."""


def _tensor_bytes(t):
    """Raw little-endian bytes of a CPU tensor, in row-major order."""
    t = t.detach().to("cpu").contiguous()
    nbytes = t.numel() * t.element_size()
    if nbytes == 0:
        return b""
    return ctypes.string_at(t.data_ptr(), nbytes)


def _itemsize(t):
    return t.element_size() if isinstance(t, torch.Tensor) else 0


def save(path, tensors, metadata=None):
    """Writes `tensors` ({name: tensor}) to `path` as safetensors.

    Like the reference writer, tensors are laid out by decreasing element size
    (ties keep the dict's order), so with the 8-byte-aligned data section every
    tensor starts at a multiple of its element size and a C reader may use the
    mapped bytes in place. `metadata`, if given, must
    map str to str. The file is written to a temporary name and renamed, so a
    reader never sees a half-written file.
    """
    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("safetensors metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    blobs = []
    offset = 0
    items = sorted(tensors.items(), key=lambda kv: -_itemsize(kv[1]))
    for name, t in items:
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError("bad tensor name %r" % (name,))
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s: not a torch.Tensor" % name)
        if t.dtype not in _TAGS:
            raise TypeError("%s: dtype %s not supported" % (name, t.dtype))
        data = _tensor_bytes(t)
        header[name] = {
            "dtype": _TAGS[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * (-len(hbytes) % 8)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load_with_metadata(path):
    """Reads a safetensors file; returns ({name: tensor}, metadata dict).

    Validates everything the format promises: header length within the file,
    JSON object header, known dtypes, non-negative integer shapes, offsets
    that match dtype x shape, lie inside the data section and tile it exactly
    (no gaps, no overlaps). Raises SafetensorsError otherwise.
    """
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise SafetensorsError("%s: shorter than the 8-byte header length" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if n > _MAX_HEADER or 8 + n > len(raw):
        raise SafetensorsError("%s: header length %d does not fit the file (%d bytes)"
                               % (path, n, len(raw)))
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError("%s: header is not valid JSON: %s" % (path, e))
    if not isinstance(header, dict):
        raise SafetensorsError("%s: header is not a JSON object" % path)
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise SafetensorsError("%s: __metadata__ must map str to str" % path)

    data = bytearray(raw[8 + n:])
    spans = []
    out = {}
    for name, info in header.items():
        if not isinstance(info, dict):
            raise SafetensorsError("%s: %s: entry is not an object" % (path, name))
        dtype = _DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise SafetensorsError("%s: %s: unknown dtype %r" % (path, name, info.get("dtype")))
        shape = info.get("shape")
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise SafetensorsError("%s: %s: bad shape %r" % (path, name, shape))
        offs = info.get("data_offsets")
        if (not isinstance(offs, list) or len(offs) != 2 or
                not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)):
            raise SafetensorsError("%s: %s: bad data_offsets %r" % (path, name, offs))
        begin, end = offs
        numel = 1
        for d in shape:
            numel *= d
        itemsize = _itemsize(torch.empty((), dtype=dtype))
        if not (0 <= begin <= end <= len(data)):
            raise SafetensorsError("%s: %s: data_offsets %r outside the data section (%d bytes)"
                                   % (path, name, offs, len(data)))
        if end - begin != numel * itemsize:
            raise SafetensorsError("%s: %s: data_offsets %r hold %d bytes, dtype x shape needs %d"
                                   % (path, name, offs, end - begin, numel * itemsize))
        spans.append((begin, end, name))
        if numel == 0:
            out[name] = torch.empty(shape, dtype=dtype)
        else:
            out[name] = torch.frombuffer(data, dtype=dtype, count=numel,
                                         offset=begin).reshape(shape).clone()
    # The tensors must tile the data section exactly.
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            raise SafetensorsError("%s: %s starts at %d, expected %d (gap or overlap)"
                                   % (path, name, begin, pos))
        pos = end
    if pos != len(data):
        raise SafetensorsError("%s: %d trailing bytes after the last tensor" % (path, len(data) - pos))
    return out, metadata


def load(path):
    """Reads a safetensors file; returns {name: tensor} in header order."""
    return load_with_metadata(path)[0]
