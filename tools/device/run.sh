#!/bin/bash
# tools/device/run.sh - the device machine's side of a GPU check: runs what
# tools/device/pack.sh packed into .dev/ against the lent GPU, in one call.
#
# Owns: unpacking .dev/ into /tmp/vj; then, each step under its own time
# limit and all of them within BUDGET_S:
#   info   the GPU, driver, nvcc, torch and timm versions; unresolved libraries
#   tests  `make gpu-test`'s three programs (test_gpu_ops, _train, _dp);
#          test_gpu_ops includes the flash attention's checks (against the
#          CPU twin and the unfused path, the same bits on a rerun and with
#          the tiles copied through registers)
#   attn   gpu_bench --attention: the attention op alone, flash (cp.async
#          pipeline) against flash-sync (tiles through registers),
#          flash-fused (the fused backward: S and dP once, dQ's parts added
#          in order) and unfused, forward + backward TFLOP/s at vit_b16's
#          shapes (b128, T 197 and 577), beside torch's SDPA on each of its
#          backends (cuDNN, FlashAttention-2, memory-efficient, math) at the
#          same shapes: bench/attention_vs_torch.py, $OUT/attention.json
#   train  fmnist_small, bf16-mixed and fp16-mixed, 3 epochs of the packed
#          subset, on cuda
#   plan   bench/plan_gpu_bench.py: `vitjob-worker plan --device cuda`
#          against training runs of the same configs on this GPU (memory
#          and img/s; vit_b16/vit_l16 from PNG shards it writes)
#   loader bench/loader_gpu_bench.py: vit_b16 b128 bf16-mixed from
#          ImageNet-sized JPEG shards it makes, with 4, 8 and 15 decode
#          threads: the seconds training waited for data against the step
#   noloader  gpu_bench (the trainer's step on a batch already in memory,
#          without the data loader) for the configs where the plan's img/s
#          misses the training run's: which of the two bounds the step
#   queued gpu_bench vit_b16 b128 bf16-mixed with its steps queued as the
#          trainer queues them, then with --sync-steps (a synchronize after
#          each step: the engine before): what the host waits cost; then
#          with --graph (one step captured as a CUDA graph and replayed:
#          what graphs would save, item 4); with --candidates (the step on
#          the candidate kernels, kernels/ops.h OPS_CANDIDATE_KERNELS: the
#          fused flash backward, bias gradients from the BGRADB epilogue;
#          its time and peak memory against the default's), and both
#          tables again with --profile (each op's time); and a 12-step training run
#          whose summary must say step_host_waits 0
#   kernels  Nsight Compute (ncu) over two steps (one warm-up, one
#          timed) of vit_b16 b128 bf16-mixed, on the default table and on
#          the candidates': each kernel's time, DRAM and SM throughput (% of
#          peak), achieved occupancy and registers, by kernel
#          (tools/device/ncu_summary.py: $OUT/ncu-*.csv and the tables in
#          steps.log): which kernels are far from the bandwidth they need,
#          and why, where --profile has one row per op (LayerNorm's backward
#          is three kernels, the flash backward two)
#   bf16ref  tests/ref/bf16_vs_torch.py (issue 42, item 6): fmnist_small, 3
#          epochs of the packed subset (468 steps), from the same initial
#          weights in the trainer's data order: the worker in bf16-mixed on
#          the GPU and on the CPU (its emulation), torch autocast bf16 and
#          fp32 on the GPU, the worker in fp32 on the GPU; seeds 1,2,3 as
#          the time allows (BF16_SEEDS); $OUT/bf16ref.json
#   sanflash  compute-sanitizer: memcheck over the flash attention's
#          tests alone and racecheck over their bf16 half (a filter on
#          test_gpu_ops); `san` runs these too
#   san    then memcheck and initcheck over test_gpu_ops, a
#          20-step train run and gpu_bench (vit_ti16); racecheck over
#          test_gpu_ops without cuBLAS's own kernels (nvjet_*, whose
#          TMA/mbarrier pipelines racecheck cannot follow); synccheck
#   bench  bench/gpu_vs_torch.py (vit_b16 and vit_l16 against timm) with the
#          time left (BENCH_ARGS: more of its flags, e.g. --models vit_b16);
#          the report lands in $OUT/bench.md
# Everything prints to stdout and $OUT/steps.log.
# Must not: install anything, or change the GPU's settings.
#
# usage (on the device machine, from the repository root; `run` with carry
# [".dev"]):  bash tools/device/run.sh BUDGET_S [step ...]   (default: all)
BUDGET=${1:-420}
shift || true
STEPS=" ${*:-info tests attn train plan loader san bench} "
T0=$SECONDS
D=$PWD/.dev
W=/tmp/vj
OUT=${OUT:-/tmp/vj-out}
rm -rf "$W" && mkdir -p "$W/syslib" "$OUT"
exec > >(tee -a "$OUT/steps.log") 2>&1
left() { echo $((BUDGET - (SECONDS - T0))); }
on() { [[ "$STEPS" == *" $1 "* ]]; }
step() { # name limit command...: the limit shrinks to the time left
    local name=$1 t=$2 l s rc
    shift 2
    l=$(left)
    [ "$t" -gt $((l - 5)) ] && t=$((l - 5))
    if [ "$t" -lt 10 ]; then echo "=== $name SKIPPED (no time left)"; return; fi
    echo "=== $name (limit ${t}s) $(date +%T)"
    s=$SECONDS
    timeout -k 5 "$t" "$@"
    rc=$?
    echo "=== $name rc=$rc wall=$((SECONDS - s))s"
}

tar -C "$W" -xJf "$D/prog.tar.xz" && tar -C "$W/syslib" -xJf "$D/syslib.tar.xz" || exit 2
# NVIDIA's libraries where this image keeps them (the CUDA toolkit, the
# nvidia-*-cu13 wheels of its PyTorch)
CUDALIBS=$(find /usr/local /usr/lib /opt -xdev \( -name libnccl.so.2 -o -name libcublasLt.so.13 \
    -o -name libcublas.so.13 \) 2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' :)
VJLD=$W/syslib:$CUDALIBS
VJ="env LD_LIBRARY_PATH=$VJLD VITJOB_CUDA_BACKEND=$W/lib/libvitjob_cuda.so"
# gpu_bench as bench/gpu_vs_torch.py runs it: a wrapper that sets the
# libraries, so that python's own processes keep theirs
mv "$W/bin/gpu_bench" "$W/bin/gpu_bench.real"
printf '#!/bin/sh\nexec %s %s "$@"\n' "$VJ" "$W/bin/gpu_bench.real" > "$W/bin/gpu_bench"
chmod +x "$W/bin/gpu_bench"
mv "$W/bin/vitjob-worker" "$W/bin/vitjob-worker.real"
printf '#!/bin/sh\nexec %s %s "$@"\n' "$VJ" "$W/bin/vitjob-worker.real" > "$W/bin/vitjob-worker"
chmod +x "$W/bin/vitjob-worker"
GPUKIND=h100
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200 && GPUKIND=h200
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
TR="$W/bin/vitjob-worker train --set training.device=cuda --set data.uri=file://$D/fmnist
    --set model.preset=fmnist_small --set training.precision=bf16-mixed --set training.exportPath="

if on info; then
    echo "CUDALIBS=$CUDALIBS compute-sanitizer=$CS nproc=$(nproc)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nvcc --version | tail -1
    python3 -c "import torch, timm; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'timm', timm.__version__)"
    $VJ ldd "$W/lib/libvitjob_cuda.so" "$W/tests/test_gpu_ops" "$W/bin/vitjob-worker" | grep "not found"
fi
if on tests; then
    step gpu_ops 100 $VJ "$W/tests/test_gpu_ops" --verbose -j8
    step gpu_train 80 $VJ "$W/tests/test_gpu_train" --verbose -j4
    step gpu_dp 80 $VJ "$W/tests/test_gpu_dp" --verbose
fi
if on attn; then
    step attn_bench 150 env PYTHONUNBUFFERED=1 python3 bench/attention_vs_torch.py \
        --gpu-bench "$W/bin/gpu_bench" --model vit_b16 --batch 128 --steps 10 --warmup 3 \
        --json "$OUT/attention.json"
fi
if on train; then
    step train_bf16 90 $VJ $TR --set training.epochs=3 --set training.logInterval=100
    step train_fp16 90 $VJ $TR --set training.epochs=3 --set training.logInterval=100 \
        --set training.precision=fp16-mixed
fi
if on plan; then
    step plan 240 env PYTHONUNBUFFERED=1 python3 bench/plan_gpu_bench.py --build "$W" \
        --data "$D/fmnist" --gpu $GPUKIND --timeout 40
fi
if on loader; then
    PYPIL=$(for p in python3 /usr/bin/python3; do $p -c 'import PIL' 2>/dev/null && echo $p && break; done)
    step loader 150 env PYTHONUNBUFFERED=1 ${PYPIL:-python3} bench/loader_gpu_bench.py --build "$W" \
        --images 4096 --steps 40 --workers 4,8,15 --timeout 40
fi
if on noloader; then
    for c in "vit_ti16 256 bf16-mixed" "fmnist_tiny 1024 bf16-mixed" "fmnist_small 512 fp32 --ckpt" \
             "vit_s16 128 bf16-mixed"; do
        set -- $c
        step "noloader_$1_$2_$3" 40 "$W/bin/gpu_bench" --model $1 --batch $2 --precision $3 $4 \
            --steps 20 --warmup 5
    done
fi
if on queued; then
    for f in "" --sync-steps --graph --candidates; do
        step "queued_vit_b16${f:+_${f#--}}" 45 "$W/bin/gpu_bench" --model vit_b16 --batch 128 \
            --steps 20 --warmup 5 $f
    done
    for f in "" --candidates; do
        step "profile_vit_b16${f:+_${f#--}}" 45 "$W/bin/gpu_bench" --model vit_b16 --batch 128 \
            --steps 3 --warmup 2 --profile $f
    done
    step waits 60 sh -c "$TR --set training.steps=12 --set training.optimizer.warmupSteps=2 \
        --set training.logInterval=4 | tee /dev/stderr | grep -q '\"step_host_waits\":0}'"
fi
if on kernels; then
    NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    NCU_METRICS=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
    NCU_METRICS=$NCU_METRICS,sm__throughput.avg.pct_of_peak_sustained_elapsed
    NCU_METRICS=$NCU_METRICS,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
    if [ -z "$NCU" ]; then
        echo "=== kernels SKIPPED (no ncu on this machine)"
    else
        for f in "" --candidates; do
            n=ncu${f:+_${f#--}}
            # the wrapper sets the program's libraries, ncu keeps its own
            step "$n" 120 sh -c "$NCU --csv --page raw --print-units base --metrics $NCU_METRICS \
                $W/bin/gpu_bench --model vit_b16 --batch 128 --steps 1 --warmup 1 $f > $OUT/$n.csv"
            python3 tools/device/ncu_summary.py "$OUT/$n.csv" --top 30 --json "$OUT/$n.json"
        done
    fi
fi
if on bf16ref; then
    step bf16ref 300 env PYTHONUNBUFFERED=1 python3 -m tests.ref.bf16_vs_torch \
        --worker "$W/bin/vitjob-worker" --order "$W/bin/data_order" --data "$D/fmnist" \
        --workdir /tmp/vj-bf16ref --device cuda --preset fmnist_small --steps 468 \
        --seeds "${BF16_SEEDS:-1,2,3}" --threads 15 --check-steps 20 --check-tol 1e-3 \
        --runs vitjob-fp32,torch-fp32,vitjob-bf16,torch-bf16,vitjob-bf16-cpu --json "$OUT/bf16ref.json"
fi
if on sanflash || on san; then
    SAN="$CS --error-exitcode 99 --print-limit 20"
    step memcheck_flash 50 $VJ $SAN --tool memcheck "$W/tests/test_gpu_ops" \
        --filter '*/flash_attention*' -j8
    step racecheck_flash 70 $VJ $SAN --tool racecheck --kernel-name-exclude kns=nvjet \
        "$W/tests/test_gpu_ops" --filter 'cuda_bf16/flash_attention*'
fi
if on san; then
    SAN="$CS --error-exitcode 99 --print-limit 20"
    SB="$W/bin/gpu_bench --model vit_ti16 --batch 8 --steps 2 --warmup 1 --precision bf16-mixed"
    TS=${TR/"$D/fmnist"/"$D/fmnist-s"}
    T20="$TS --set training.steps=20 --set training.optimizer.warmupSteps=5 --set training.logInterval=10"
    T5="$TS --set training.steps=5 --set training.optimizer.warmupSteps=2 --set training.logInterval=5"
    step memcheck_gpu_ops 80 $VJ $SAN --tool memcheck "$W/tests/test_gpu_ops" -j8
    step initcheck_gpu_ops 70 $VJ $SAN --tool initcheck "$W/tests/test_gpu_ops" -j8
    step racecheck_gpu_ops 100 $VJ $SAN --tool racecheck --kernel-name-exclude kns=nvjet "$W/tests/test_gpu_ops" -j8
    step memcheck_train 40 $VJ $SAN --tool memcheck $T20
    step initcheck_train 120 $VJ $SAN --tool initcheck $T5
    step memcheck_bench 60 $VJ $SAN --tool memcheck $SB
    step initcheck_bench 60 $VJ $SAN --tool initcheck $SB
    step synccheck_bench 40 $VJ $SAN --tool synccheck $SB
fi
if on bench; then
    bb=$(($(left) - 20))
    if [ "$bb" -gt 40 ]; then
        echo "=== bench (budget ${bb}s) $(date +%T)"
        PYTHONUNBUFFERED=1 timeout -k 5 $((bb + 15)) python3 bench/gpu_vs_torch.py --build "$W" \
            --budget-s "$bb" --out "$OUT/bench.md" ${BENCH_ARGS:-}
        echo "=== bench rc=$?"
    else
        echo "=== bench SKIPPED (no time left)"
    fi
fi
echo "=== done in $((SECONDS - T0))s"
