# tests.ref: the references the engine is checked against: the PyTorch ViT
# and its recipe (torch_vit.py, also the benchmarks' peer), safetensors by
# hand (safetensors_io.py), torchvision's transforms with the worker's RNG
# (transform_torch.py), and the checks over them, run from the root by
# Debian's /usr/bin/python3 (torch): a check that imports a neighbour as
# python3 -m tests.ref.<check>, the others by path too. The C drivers they
# run (*_check.c, vit_refcheck.c) are built by the Makefile.
# Must not: import the product's code (it runs the built drivers instead).
