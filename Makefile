# vitjob - top-level build. `make` builds everything into build/; `make test`
# and `make demo` install what is missing first (scripts/deps.sh).
#
#   make            binaries in build/bin, tests in build/tests
#   make test       the whole test suite (normal build, then ASan + UBSan)
#   make demo       trains a small ViT on Fashion-MNIST on the CPU
#   make bench      the CPU engine against PyTorch, and the operator against the
#                   test API server (tables, not tests)
#   make gpu-test   CUDA ops against the CPU ops (needs a GPU; see README)
#   make asan       the same programs built with AddressSanitizer + UBSan
#   make clean

CC      ?= gcc
BUILD   ?= build
ARCH    ?= -march=native
PKGS    := libcjson yaml-0.1 zlib libcurl libmicrohttpd
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# OpenBLAS built on OpenMP, so that its GEMM threads and our OpenMP loops share
# one thread pool (with the pthread build, OpenMP's spinning workers and
# OpenBLAS's threads fight over the cores: 10x slower on 2 cores). Both
# variants share a soname, hence the rpath.
BLAS_DIR   ?= /usr/lib/x86_64-linux-gnu/openblas-openmp
BLAS_CFLAGS = -I/usr/include/x86_64-linux-gnu/openblas-openmp
BLAS_LIBS   = -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lopenblas

WARN    := -Wall -Wextra -Werror
CSTD    := -std=c11 -D_POSIX_C_SOURCE=200809L
INC     := -Ilib -Ikernels -Iworker -Ioperator
CFLAGS  ?= -O3 $(ARCH) -g
ALL_CFLAGS = $(CSTD) $(WARN) $(CFLAGS) -fopenmp $(INC) $(BLAS_CFLAGS) $(PKG_CFLAGS) -MMD -MP
LDLIBS  = $(BLAS_LIBS) $(PKG_LIBS) -lsleef -lm -fopenmp
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

LIB_SRC     := $(wildcard lib/*.c)
KERNEL_SRC  := $(wildcard kernels/*.c)
WORKER_SRC  := $(filter-out worker/main.c,$(wildcard worker/*.c))
OPERATOR_SRC:= $(filter-out operator/main.c,$(wildcard operator/*.c))
CORE_SRC    := $(LIB_SRC) $(KERNEL_SRC) $(WORKER_SRC) $(OPERATOR_SRC)
TEST_SRC    := $(wildcard tests/test_*.c)

CORE_OBJ    = $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
BINS        = $(BUILD)/bin/vitjob-worker $(BUILD)/bin/vit_refcheck $(BUILD)/bin/sgemm_rate \
              $(if $(wildcard operator/main.c),$(BUILD)/bin/vitjob-operator)
TEST_BINS   = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all test demo bench gpu-test asan clean deps
.SECONDARY:
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
all: $(BINS) $(TEST_BINS)

# V=1 shows the full command lines.
Q := $(if $(V),,@)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<  ($(BUILD))")
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/bin/vitjob-worker: $(CORE_OBJ) $(BUILD)/obj/worker/main.o
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/vitjob-operator: $(CORE_OBJ) $(BUILD)/obj/operator/main.o
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/vit_refcheck: $(CORE_OBJ) $(BUILD)/obj/tests/ref/vit_refcheck.o
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/sgemm_rate: $(CORE_OBJ) $(BUILD)/obj/bench/sgemm_rate.o
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(CORE_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS) -lcriterion

# The sanitizer build: same sources, its own tree.
asan:
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/asan CFLAGS="$(ASAN_FLAGS)" all

deps:
	@scripts/deps.sh

test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@$(MAKE) --no-print-directory -j$(JOBS) asan
	tests/run.sh $(BUILD)

demo: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/bin/vitjob-worker
	@mkdir -p $(BUILD)/demo
	$(BUILD)/bin/vitjob-worker train --set training.exportPath=$(BUILD)/demo/model.safetensors

bench: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/bin/vitjob-worker $(BUILD)/bin/sgemm_rate \
		$(BUILD)/bin/vitjob-operator
	/usr/bin/python3 bench/cpu_vs_torch.py --build $(BUILD)
	/usr/bin/python3 bench/operator_bench.py --build $(BUILD)

gpu-test:
	@echo "gpu-test: the CUDA backend is not in this build yet (issue 5); nothing to run"

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
