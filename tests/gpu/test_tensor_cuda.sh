# Tensor parallel on GPUs (gpu/tensor/tensor_cuda.h) through gpt_cuda_check
# tensor (its header says what it checks: 2 ranks against one GPU, the
# gathered checkpoint resumed as one GPU, the refusals), under mpirun:
# two GPUs, or one GPU shared by the two ranks with NCCL >= 2.30
# (NCCL_MULTI_RANK_GPU_ENABLE=1); otherwise skipped, saying why. The
# emulator's ctest is gpu/gpt_cuda_emulated_tensor_2ranks.
. "$(dirname "$0")/gpu_env.sh"
command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup.sh installs openmpi-bin)"
ngpu=$(nvidia-smi -L | grep -c '^GPU ')
ver=$("$GPU_CHECK" nccl-version | cut -d. -f1,2)
share=0
if [ "$ngpu" -lt 2 ]; then
  "$PY" -c "import sys; v = tuple(map(int, sys.argv[1].split('.'))); sys.exit(0 if v >= (2, 30) else 1)" "${ver:-0.0}" ||
    { echo "skip: $ngpu GPU and NCCL ${ver:-unknown} (two ranks on one GPU need NCCL >= 2.30)"; rm -rf "$T"; exit 77; }
  share=1
fi
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  NCCL_MULTI_RANK_GPU_ENABLE=$share \
  mpirun -np 2 --oversubscribe --bind-to none "$GPU_CHECK" tensor ||
  fail "gpt_cuda_check tensor on two ranks failed"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  NCCL_MULTI_RANK_GPU_ENABLE=$share \
  mpirun -np 2 --oversubscribe --bind-to none -x GPT_CUDA_CHECK_MODEL=llama \
  "$GPU_CHECK" tensor || fail "gpt_cuda_check tensor on a Llama failed"
pass
