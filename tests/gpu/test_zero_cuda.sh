# ZeRO stages 0-3 on the GPU over NCCL (gpu/zero/zero_cuda.h), through
# gpt_cuda_check zero and shards (their headers say what they check):
# - N ranks' shards (lo > 0, a last slice part padding) on one GPU, the
#   collectives done by hand: what one GPU can check of the ranks past 0;
# - one rank (NCCL through a rendezvous directory): every stage bitwise
#   one GPU's training, stage 2's checkpoint resumed at stages 1 and 3,
#   stage 3's at stage 1;
# - two ranks under mpirun, where they can run: two GPUs, or one GPU
#   shared by two ranks with NCCL >= 2.30 (NCCL_MULTI_RANK_GPU_ENABLE=1).
#   Otherwise that part is skipped, saying why.
. "$(dirname "$0")/gpu_env.sh"

"$GPU_CHECK" shards || fail "gpt_cuda_check shards (one GPU) failed"
"$GPU_CHECK" zero || fail "gpt_cuda_check zero (one rank) failed"
GPT_CUDA_CHECK_MODEL=llama "$GPU_CHECK" zero ||
  fail "gpt_cuda_check zero on a Llama (one rank) failed"

ngpu=$(nvidia-smi -L | grep -c '^GPU ')
ver=$("$GPU_CHECK" nccl-version | cut -d. -f1,2)
share=0
if [ "$ngpu" -lt 2 ]; then
  if "$PY" -c "import sys; v = tuple(map(int, sys.argv[1].split('.'))); sys.exit(0 if v >= (2, 30) else 1)" "${ver:-0.0}"; then
    share=1
  else
    # The one-rank checks above passed; the two-rank one could not run:
    # 77, so run.sh lists this test as skipped rather than passed.
    echo "SKIPPED two ranks: $ngpu GPU and NCCL ${ver:-unknown} (two ranks on one GPU need NCCL >= 2.30); shards and one rank passed"
    rm -rf "$T"
    exit 77
  fi
fi
command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup.sh installs openmpi-bin)"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  NCCL_MULTI_RANK_GPU_ENABLE=$share \
  mpirun -np 2 --oversubscribe --bind-to none "$GPU_CHECK" zero ||
  fail "gpt_cuda_check zero on two ranks failed"
pass
