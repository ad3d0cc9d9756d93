# vitjob - top-level build. `make` builds everything into build/; `make test`
# and `make demo` install what is missing first (scripts/deps.sh).
#
#   make            binaries in build/bin, tests in build/tests
#   make test       the whole test suite (normal build, then ASan + UBSan)
#   make demo       a local two-node cluster trains a ViTJob on Fashion-MNIST
#   make cluster    the same local cluster with the operator, kept up: prints the
#                   `export KUBECONFIG=...` line; `make cluster-down` stops it
#   make train      the same small ViT in one process on the CPU
#   make bench      the CPU engine against PyTorch, the operator against the
#                   test API server, the data pipeline against torchvision's
#                   DataLoader, DeiT's recipe with and without, `plan`'s
#                   images/s against the measured (tables, not tests)
#   make gpu-test   CUDA ops against the CPU ops, bf16 GPU training (needs a GPU)
#   make bench-gpu  the GPU engine against PyTorch/timm on the same GPU
#   make asan       the same programs built with AddressSanitizer + UBSan
#   make image-test the container images built with buildah and run (slow)
#   make schema     the CRD's config keys (and the chart's copy), the README's
#                   key table and docs/design.md's spec summary written again from
#                   the config table in api/config_keys.c, and docs/design.md's exit
#                   codes from api/exitcode.c
#   make clean

# `make` alone builds everything: the first rule below must not be the
# default goal (the helmrender rule once was, and a fresh clone's `make`
# built only that).
.DEFAULT_GOAL := all

CC      ?= gcc
BUILD   ?= build
ARCH    ?= -march=native
PKGS    := libcjson yaml-0.1 zlib libcurl libmicrohttpd libxml-2.0 libcrypto libisal
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# what each program links: the worker no HTTP server, the operator no BLAS,
# SLEEF, OpenMP or zlib (and so neither does its container image); only the
# worker has the S3 client (lib/s3.c: libxml2 for S3's XML, libcrypto's SHA-256)
WORKER_PKG_LIBS   = $(shell pkg-config --libs libcjson yaml-0.1 zlib libcurl libxml-2.0 libcrypto libisal $(DECODE_PKGS) 2>/dev/null)
# the image decoders (worker/data/decode.c): TurboJPEG, libjpeg-turbo's
# libjpeg API (a JPEG's region: jpeg_crop_scanline, jpeg_skip_scanlines) and
# libspng, linked by the worker and by the tests (the loader decodes; the
# operator links none of them)
DECODE_PKGS   := libturbojpeg libjpeg spng
DECODE_CFLAGS  = $(shell pkg-config --cflags $(DECODE_PKGS) 2>/dev/null)
DECODE_LIBS    = $(shell pkg-config --libs $(DECODE_PKGS) 2>/dev/null)
OPERATOR_PKG_LIBS = $(shell pkg-config --libs libcjson yaml-0.1 libcurl libmicrohttpd 2>/dev/null)
# OpenBLAS built on OpenMP, so that its GEMM threads and our OpenMP loops share
# one thread pool (with the pthread build, OpenMP's spinning workers and
# OpenBLAS's threads fight over the cores: 10x slower on 2 cores). Both
# variants share a soname, hence the rpath.
BLAS_DIR   ?= /usr/lib/x86_64-linux-gnu/openblas-openmp
BLAS_CFLAGS = -I/usr/include/x86_64-linux-gnu/openblas-openmp
BLAS_LIBS   = -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lopenblas

# The CUDA backend is built whenever nvcc exists (it does on every
# development and CI machine, in /usr/local/cuda): sm_80 and sm_90 code plus
# sm_90 PTX, into the plugin $(BUILD)/lib/libvitjob_cuda.so, the only thing
# linked against cuBLASLt, cuBLAS, NCCL and the CUDA runtime. The binaries
# load it when a run asks for the GPU (kernels/ops_cuda_loader.c), so they
# start on machines without NVIDIA's libraries; without a usable GPU,
# device: cuda fails at start with one line and exit code 2. The objects are
# shared by the normal and the sanitizer trees (nvcc output is not
# instrumented either way). NVCC= (empty) builds without it.
NVCC    ?= $(firstword $(wildcard /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CUDA_BUILD ?= $(BUILD)/cuda
ifneq ($(strip $(NVCC)),)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# flash_attention.cu first: its templates take nvcc over a minute, the other
# files a few seconds each, so it starts first and overlaps the C compiles
# (`all` lists the plugin first) instead of ending the build alone
CUDA_SRC   := kernels/flash_attention.cu $(filter-out kernels/flash_attention.cu,$(sort $(wildcard kernels/*.cu)))
CUDA_DEFS  := -DVITJOB_WITH_CUDA -I$(CUDA_HOME)/include
CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl -lcudart
CUDA_PLUGIN_LIBS := -L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl
CUDA_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVCC_FLAGS ?= -std=c++17 -O3 -g -lineinfo $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror,-fPIC \
              -Werror all-warnings -Ilib -Ikernels
CUDA_PLUGIN = $(BUILD)/lib/libvitjob_cuda.so
endif
CUDA_OBJ    = $(CUDA_SRC:%.cu=$(CUDA_BUILD)/%.o)

WARN    := -Wall -Wextra -Werror
CSTD    := -std=c11 -D_POSIX_C_SOURCE=200809L
# Each module sees lib/ and api/ and itself: worker/ and kernels/ never see
# operator/, and operator/ never sees worker/ or kernels/. Inside worker/,
# each folder sees only what its README allows (data/ and gang/ nothing of
# the worker's but themselves, ckpt/ gang/, train/ all but plan/, plan/ and
# main.c all): the include paths enforce it. One exception: train.c sees
# plan/ for the memory check's sum, plan_memory.h (tests/layout.bats: that
# header alone). Tests and benchmarks see all.
TRAIN_INC  := -Iworker/train -Iworker/gang -Iworker/ckpt -Iworker/data
WORKER_INC := $(TRAIN_INC) -Iworker/plan
INC     := -Ilib -Iapi -Ikernels $(WORKER_INC) -Ioperator
CFLAGS  ?= -O3 $(ARCH) -g
ALL_CFLAGS = $(CSTD) $(WARN) $(CFLAGS) -fopenmp $(INC) $(BLAS_CFLAGS) $(PKG_CFLAGS) $(CUDA_DEFS) -MMD -MP
# gloo (CPU collectives, C++) through worker/gang/comm_gloo.cc: the worker only
GLOO_LIBS = -lgloo -lstdc++
LDLIBS  = $(BLAS_LIBS) $(PKG_LIBS) -lsleef -lm -ldl -fopenmp $(GLOO_LIBS)
WORKER_LDLIBS   = $(BLAS_LIBS) $(WORKER_PKG_LIBS) -lsleef -lm -ldl -fopenmp $(GLOO_LIBS)
OPERATOR_LDLIBS = $(OPERATOR_PKG_LIBS) -lm -lpthread
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

LIB_SRC     := $(wildcard lib/*.c)
API_SRC     := $(wildcard api/*.c)
KERNEL_SRC  := $(wildcard kernels/*.c)
WORKER_SRC  := $(wildcard worker/*/*.c)
WORKER_CXX  := $(wildcard worker/*/*.cc)
OPERATOR_SRC:= $(filter-out operator/main.c,$(wildcard operator/*.c))
CORE_SRC    := $(LIB_SRC) $(API_SRC) $(KERNEL_SRC) $(WORKER_SRC) $(OPERATOR_SRC)
TEST_SRC    := $(wildcard tests/test_*.c)

CXX_OBJ      = $(WORKER_CXX:%.cc=$(BUILD)/obj/%.o)
CORE_OBJ     = $(CORE_SRC:%.c=$(BUILD)/obj/%.o) $(CXX_OBJ)
SHARED_OBJ   = $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(API_SRC:%.c=$(BUILD)/obj/%.o)
WORKER_OBJ   = $(SHARED_OBJ) $(KERNEL_SRC:%.c=$(BUILD)/obj/%.o) $(WORKER_SRC:%.c=$(BUILD)/obj/%.o) \
               $(CXX_OBJ)
# the S3 client is the worker's (checkpoints); the operator never talks to S3,
# nor writes the CRD (api/config_schema.c: `vitjob-worker schema`)
OPERATOR_OBJ = $(filter-out $(BUILD)/obj/lib/s3.o $(BUILD)/obj/api/config_schema.o,$(SHARED_OBJ)) \
               $(OPERATOR_SRC:%.c=$(BUILD)/obj/%.o)
BINS        = $(BUILD)/bin/vitjob-worker $(BUILD)/bin/vit_refcheck $(BUILD)/bin/ft_check $(BUILD)/bin/sgemm_rate \
              $(BUILD)/bin/gpu_bench $(BUILD)/bin/comm_bench $(BUILD)/bin/ckpt_bench $(BUILD)/bin/xf_check \
              $(BUILD)/bin/loader_bench \
              $(BUILD)/bin/mixup_check $(BUILD)/bin/data_order \
              $(BUILD)/bin/ra_check \
              $(if $(wildcard operator/main.c),$(BUILD)/bin/vitjob-operator)
TEST_BINS   = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# tools/helmrender: the chart tests' stand-in for `helm template`, in Go,
# from Debian's packages (GOPATH mode: /usr/share/gocode). Built when go
# exists (scripts/deps.sh installs it); the chart tests skip without it.
GO         ?= $(shell command -v go 2>/dev/null)
HELMRENDER  = $(if $(GO),$(BUILD)/bin/helmrender)
$(BUILD)/bin/helmrender: tools/helmrender/main.go
	@mkdir -p $(@D)
	@echo "  GO      $@"
	$(Q)GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$(abspath $(BUILD))/.gocache \
		$(GO) build -o $@ ./tools/helmrender

# tests/logfmt_decode: the log tests' logfmt parser (go-logfmt, the reference
# decoder, from Debian's golang-github-go-logfmt-logfmt-dev), built the same
# way; tests/worker.bats pipes the worker's log through it, and skips its
# parse-back tests, saying why, without it.
LOGFMT_DECODE = $(if $(GO),$(BUILD)/bin/logfmt_decode)
$(BUILD)/bin/logfmt_decode: tests/logfmt_decode/main.go
	@mkdir -p $(@D)
	@echo "  GO      $@"
	$(Q)GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$(abspath $(BUILD))/.gocache \
		$(GO) build -o $@ ./tests/logfmt_decode

.PHONY: all test demo cluster cluster-down train bench bench-gpu gpu-test asan clean deps image-test schema
.SECONDARY:
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
all: $(CUDA_PLUGIN) $(BINS) $(TEST_BINS) $(HELMRENDER) $(LOGFMT_DECODE)

# V=1 shows the full command lines.
Q := $(if $(V),,@)

# Objects are rebuilt when the flags change (e.g. nvcc appears or goes).
FLAGS_STAMP := $(BUILD)/.flags
FLAGS_NOW    = $(ALL_CFLAGS) | $(NVCC) $(NVCC_FLAGS) | $(CUDA_SRC)
$(shell mkdir -p $(BUILD) && (echo '$(FLAGS_NOW)' | cmp -s - $(FLAGS_STAMP) || echo '$(FLAGS_NOW)' > $(FLAGS_STAMP)))
# The CUDA objects have a stamp of their own, of nvcc's flags alone: the
# normal and the sanitizer trees share them ($(CUDA_BUILD)), and the C flags
# of one tree must not make the other compile them again (minutes of nvcc).
CUDA_FLAGS_STAMP := $(CUDA_BUILD)/.flags
CUDA_FLAGS_NOW    = $(NVCC) $(NVCC_FLAGS) | $(CUDA_SRC)
$(shell mkdir -p $(CUDA_BUILD) && (echo '$(CUDA_FLAGS_NOW)' | cmp -s - $(CUDA_FLAGS_STAMP) || echo '$(CUDA_FLAGS_NOW)' > $(CUDA_FLAGS_STAMP)))

# The commit goes into api/version.o alone, through a stamp rewritten only
# when it changes (a build from a tarball or an image context says
# GIT_COMMIT=... or gets "unknown").
GIT_COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
COMMIT_STAMP := $(BUILD)/.commit
$(shell mkdir -p $(BUILD) && (echo '$(GIT_COMMIT)' | cmp -s - $(COMMIT_STAMP) || echo '$(GIT_COMMIT)' > $(COMMIT_STAMP)))
$(BUILD)/obj/api/version.o: $(COMMIT_STAMP)
$(BUILD)/obj/api/version.o: ALL_CFLAGS += -DVJ_GIT_COMMIT='"$(GIT_COMMIT)"'

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<  ($(BUILD))")
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

# the one C++ file (the gloo shim): C++17, the C flags' warnings and sanitizers
CXX     ?= g++
ALL_CXXFLAGS = -std=c++17 $(WARN) $(CFLAGS) -Ilib -Iapi -Iworker/gang -MMD -MP
$(BUILD)/obj/%.o: %.cc $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CXX     $<  ($(BUILD))")
	$(Q)$(CXX) $(ALL_CXXFLAGS) -c $< -o $@

# the module boundaries, enforced by what each directory can include
$(BUILD)/obj/lib/%.o $(BUILD)/obj/api/%.o: INC := -Ilib -Iapi
$(BUILD)/obj/kernels/%.o: INC := -Ilib -Iapi -Ikernels
$(BUILD)/obj/worker/data/%.o: INC := -Ilib -Iapi -Iworker/data
$(BUILD)/obj/worker/gang/%.o: INC := -Ilib -Iapi -Ikernels -Iworker/gang
$(BUILD)/obj/worker/ckpt/%.o: INC := -Ilib -Iapi -Ikernels -Iworker/ckpt -Iworker/gang
$(BUILD)/obj/worker/train/%.o: INC := -Ilib -Iapi -Ikernels $(TRAIN_INC)
$(BUILD)/obj/worker/train/train.o: INC := -Ilib -Iapi -Ikernels $(TRAIN_INC) -Iworker/plan
$(BUILD)/obj/worker/plan/%.o $(BUILD)/obj/worker/main.o: INC := -Ilib -Iapi -Ikernels $(WORKER_INC)
$(BUILD)/obj/operator/%.o: INC := -Ilib -Iapi -Ioperator

$(CUDA_BUILD)/%.o: %.cu $(CUDA_FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCC_FLAGS) -MMD -MP -c $< -o $@

$(CUDA_PLUGIN): $(CUDA_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVLD    $@")
	$(Q)$(NVCC) -shared $(CUDA_ARCH) $^ -o $@ $(CUDA_PLUGIN_LIBS)

# the CUDA/cuBLAS/NCCL check macros are tested against the real libraries
$(BUILD)/tests/test_check: LDLIBS += $(CUDA_LIBS)

# One link rule: every program is its objects and the libraries it uses.
define link
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CSTD) $(CFLAGS) $^ -o $@ $(1)
endef

# the worker: lib + api + kernels + worker; the operator: lib + api + operator
$(BUILD)/bin/vitjob-worker: $(WORKER_OBJ) $(BUILD)/obj/worker/main.o
	$(call link,$(WORKER_LDLIBS))

$(BUILD)/bin/vitjob-operator: $(OPERATOR_OBJ) $(BUILD)/obj/operator/main.o
	$(call link,$(OPERATOR_LDLIBS))

# the reference checks (tests/ref/NAME.c) and the benchmark drivers (bench/NAME.c) run the
# worker's code
$(BUILD)/bin/vit_refcheck $(BUILD)/bin/ft_check: $(BUILD)/bin/%: $(WORKER_OBJ) $(BUILD)/obj/tests/ref/%.o
	$(call link,$(WORKER_LDLIBS))

# the transforms against torch and torchvision (tests/transform.bats): transform.c alone
$(BUILD)/bin/xf_check: $(BUILD)/obj/tests/ref/xf_check.o $(BUILD)/obj/worker/data/transform.o \
		$(BUILD)/obj/worker/data/rng.o $(BUILD)/obj/lib/util.o $(BUILD)/obj/lib/stdfds.o
	$(call link,-lm)

# the trainer's Fashion-MNIST order for a reference run (tests/ref/bf16_vs_torch.py):
# data.c's loader alone
$(BUILD)/bin/data_order: $(BUILD)/obj/tests/ref/data_order.o $(BUILD)/obj/worker/data/data.o \
		$(BUILD)/obj/worker/data/rng.o $(BUILD)/obj/lib/file.o $(BUILD)/obj/lib/util.o \
		$(BUILD)/obj/lib/buf.o $(BUILD)/obj/lib/stdfds.o
	$(call link,-lz -lm)

# RandAugment and random erasing against PIL and torch (tests/randaug.bats):
# randaug.c, erasing.c and the 8-bit resampling of transform.c alone
$(BUILD)/bin/ra_check: $(BUILD)/obj/tests/ref/ra_check.o $(BUILD)/obj/worker/data/randaug.o \
		$(BUILD)/obj/worker/data/erasing.o $(BUILD)/obj/worker/data/transform.o \
		$(BUILD)/obj/worker/data/rng.o $(BUILD)/obj/api/randaug_spec.o $(BUILD)/obj/lib/util.o \
		$(BUILD)/obj/lib/stdfds.o
	$(call link,-lm)

# mixup and cutmix against torch (tests/mixup.bats): mixup.c alone
$(BUILD)/bin/mixup_check: $(BUILD)/obj/tests/ref/mixup_check.o $(BUILD)/obj/worker/data/mixup.o \
		$(BUILD)/obj/worker/data/rng.o $(BUILD)/obj/lib/stdfds.o
	$(call link,-lm)

$(BUILD)/bin/sgemm_rate $(BUILD)/bin/gpu_bench $(BUILD)/bin/comm_bench $(BUILD)/bin/ckpt_bench \
$(BUILD)/bin/loader_bench: $(BUILD)/bin/%: $(WORKER_OBJ) $(BUILD)/obj/bench/%.o
	$(call link,$(WORKER_LDLIBS))

# the decoders' and encoders' headers (TurboJPEG, libspng) for the codecs
# and the tests that make images; the tests link the whole core, the
# codecs included (the loader decodes)
DECODE_OBJ = $(BUILD)/obj/worker/data/decode.o
CODEC_OBJ  = $(DECODE_OBJ) $(BUILD)/obj/worker/data/encode.o $(BUILD)/obj/worker/data/shardwriter.o
$(CODEC_OBJ) $(TEST_SRC:tests/%.c=$(BUILD)/obj/tests/%.o): ALL_CFLAGS += $(DECODE_CFLAGS)

# A unit test links the core as an archive, so that it takes the objects it
# uses and, --as-needed, only their libraries: Criterion starts every test
# in a process of its own (an exec of the test binary), and each exec loads
# every library linked. test_buf: 22 libraries instead of 65, its 3 tests
# 0.36 s instead of 0.8 s.
CORE_LIB  = $(BUILD)/lib/libvitjob-core.a
AS_NEEDED = -Wl,--as-needed
$(CORE_LIB): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(CORE_LIB)
	$(call link,$(AS_NEEDED) $(LDLIBS) $(DECODE_LIBS) -lcriterion)


# test_decode: the decoder alone (lib/check.h is header-only; lib/util.c
# writes its messages)
$(BUILD)/tests/test_decode: $(BUILD)/obj/tests/test_decode.o $(DECODE_OBJ) $(BUILD)/obj/lib/util.o
	$(call link,$(DECODE_LIBS) -lcriterion)

# test_fuzz_data: the shard readers (tar, wds and its cJSON, rng) and the decoder
$(BUILD)/tests/test_fuzz_data: $(BUILD)/obj/tests/test_fuzz_data.o $(DECODE_OBJ) \
		$(addprefix $(BUILD)/obj/worker/data/,tar.o wds.o rng.o) $(BUILD)/obj/lib/util.o
	$(call link,$(DECODE_LIBS) $(shell pkg-config --libs libcjson) -lm -lcriterion)

# The sanitizer build: same sources, its own tree.
asan:
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/asan CUDA_BUILD=$(CUDA_BUILD) CFLAGS="$(ASAN_FLAGS)" HELMRENDER= LOGFMT_DECODE= all

deps:
	@scripts/deps.sh

# The sanitizer tree is built by tests/run.sh beside the first suites, at a
# lower priority (ASAN_MAKE: the command; the sanitized suites wait for it).
# Given through a variable of its own, so that `make -n test` runs no suite.
ASAN_MAKE_CMD = $(MAKE) --no-print-directory -j$(JOBS) asan
test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) all
	ASAN_MAKE="$(ASAN_MAKE_CMD)" tests/run.sh $(BUILD)

# The parts of other files that the config table (api/config_keys.c) and the
# exit-code table (api/exitcode.c) write (api/config_schema.h): each config
# key's schema in the CRD, between its "BEGIN generated" and "END generated"
# comments; the chart's byte copy of the CRD; the README's key table;
# docs/design.md's spec summary and exit-code table. A file is replaced only
# when it changes. tests/schema.bats fails when a committed file is not what
# this writes.
SCHEMA_FILES = manifests/00-crd.yaml README.md docs/design.md
CHART_CRD    = charts/vitjob-operator/crds/vitjobs.vitjob.dev.yaml
schema: $(BUILD)/bin/vitjob-worker
	$(Q)for f in $(SCHEMA_FILES); do \
	  $(BUILD)/bin/vitjob-worker schema $$f > $$f.tmp || { rm -f $$f.tmp; exit 1; }; \
	  if cmp -s $$f.tmp $$f; then rm $$f.tmp; else mv $$f.tmp $$f; echo "  SCHEMA  $$f"; fi; \
	done
	$(Q)cmp -s manifests/00-crd.yaml $(CHART_CRD) || { cp manifests/00-crd.yaml $(CHART_CRD) && \
	  echo "  SCHEMA  $(CHART_CRD)"; }

# The container images (docker/*.Dockerfile) built with buildah (vfs
# storage, chroot isolation) from a Debian base made with debootstrap, then
# run: the operator's --version as its non-root user, the CPU worker's
# --version and a short training (tests/images.bats). Slow (minutes of apt
# and compiling); CI runs it after `make test`.
image-test:
	@scripts/deps.sh image
	BUILD=$(abspath $(BUILD)) bats --tap tests/images.bats

# The whole story on one machine (tests/cluster/demo.py): a local two-node
# cluster, the operator from manifests/, the 2-replica Fashion-MNIST ViTJob,
# `kubectl get vj` until Succeeded, the test accuracy. Where the machine cannot
# run the local cluster (it needs root for network namespaces, and kubectl),
# it says why and runs `make train` instead.
# Quiet unless V=1: the build's lines go to $(BUILD)/demo/build.log (its
# last lines are shown when it fails), as scripts/deps.sh keeps apt-get's.
demo: deps
	@mkdir -p $(BUILD)/demo
	@$(if $(V),,echo "demo: building vitjob-worker and vitjob-operator (log: $(BUILD)/demo/build.log)";) \
	  $(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/bin/vitjob-worker $(BUILD)/bin/vitjob-operator \
	    $(CUDA_PLUGIN) $(if $(V),,> $(BUILD)/demo/build.log 2>&1 || \
	    { tail -n 30 $(BUILD)/demo/build.log; echo "demo: the build failed: $(BUILD)/demo/build.log"; exit 1; })
	@/usr/bin/python3 -m tests.cluster.demo --build $(BUILD); rc=$$?; \
	  if [ $$rc -eq 3 ]; then $(MAKE) --no-print-directory train; else exit $$rc; fi

# The local two-node cluster of the demo with the operator, kept up for you
# (tests/cluster/up.py): returns with the nodes Ready and prints the line to
# export KUBECONFIG; `make cluster-down` stops it. One local cluster at a
# time: `make demo` and the cluster suites of `make test` take its pod
# network over.
cluster: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/bin/vitjob-worker $(BUILD)/bin/vitjob-operator $(CUDA_PLUGIN)
	@/usr/bin/python3 -m tests.cluster.up start --build $(BUILD)

cluster-down:
	@/usr/bin/python3 -m tests.cluster.up stop --build $(BUILD)

# The embedded default config in one process: a small ViT on Fashion-MNIST.
train: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/bin/vitjob-worker $(CUDA_PLUGIN)
	@mkdir -p $(BUILD)/demo
	$(BUILD)/bin/vitjob-worker train --set training.exportPath=$(BUILD)/demo/model.safetensors

bench: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/bin/vitjob-worker $(BUILD)/bin/sgemm_rate \
		$(BUILD)/bin/vitjob-operator $(BUILD)/bin/comm_bench $(BUILD)/bin/ckpt_bench \
		$(BUILD)/bin/loader_bench
	/usr/bin/python3 bench/cpu_vs_torch.py --build $(BUILD)
	PYTHONPATH=$(CURDIR) /usr/bin/python3 bench/operator_bench.py --build $(BUILD)
	$(BUILD)/bin/comm_bench
	python3 bench/ranks_bench.py --build $(BUILD)
	python3 bench/ckpt_bench.py --build $(BUILD)
	/usr/bin/python3 bench/loader_train_bench.py --build $(BUILD)
	python3 bench/recipe_bench.py --build $(BUILD)
	python3 bench/plan_bench.py --build $(BUILD)

# Every CUDA op against the CPU op, bf16 training on the GPU against the
# CPU, and the data-parallel strategies on NCCL ranks against the CPU
# (tests/test_gpu_*.c; `make test` runs them too, and they skip, saying
# why, where no GPU exists).
gpu-test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/tests/test_gpu_ops $(BUILD)/tests/test_gpu_train \
		$(BUILD)/tests/test_gpu_dp $(CUDA_PLUGIN)
	$(BUILD)/tests/test_gpu_ops --verbose
	$(BUILD)/tests/test_gpu_train --verbose
	$(BUILD)/tests/test_gpu_dp --verbose

# The GPU engine against PyTorch + timm (eager and torch.compile) on the
# same GPU, in one run (bench/gpu_vs_torch.py; needs a GPU, torch and timm);
# then the plan's img/s and memory against training runs on that GPU
# (bench/plan_gpu_bench.py).
bench-gpu: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/bin/gpu_bench $(BUILD)/bin/vitjob-worker $(CUDA_PLUGIN)
	python3 bench/gpu_vs_torch.py --build $(BUILD)
	python3 bench/attention_vs_torch.py --gpu-bench $(BUILD)/bin/gpu_bench
	python3 bench/plan_gpu_bench.py --build $(BUILD)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) $(CUDA_BUILD) -path '$(BUILD)/image' -prune -o -name '*.d' -type f -print 2>/dev/null)
