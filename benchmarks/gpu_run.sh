#!/usr/bin/env bash
# The GPU session's measurements, in priority order, each skipped when the time left is too short for it.
# Runs on the GPU machine after the kit is unpacked (../shared/gpu/README.md), from the project root:
#
#   . /tmp/gpu-env.sh && bash benchmarks/gpu_run.sh SECONDS DATA_DIR
#
# DATA_DIR holds what ../shared would give (it does not travel): reference/pretraining_data/sample_text_default.tfrecord,
# vocab/uncased/vocab.txt. Results go to $OUT (or /tmp/gpu-out):
# gpu_run.log (everything printed), pretraining.jsonl (one bench_pretraining result a line), pytest.xml.
set -u
budget=${1:?seconds}; data=${2:?data dir}
deadline=$(( $(date +%s) + budget ))
out=${OUT:-/tmp/gpu-out}; mkdir -p "$out"
log=$out/gpu_run.log
export BERT_SHARED_DIR=$data PYTHONUNBUFFERED=1
records=$data/reference/pretraining_data/sample_text_default.tfrecord  # 118 records, repeated

left() { echo $(( deadline - $(date +%s) )); }
step() {  # step NAME SECONDS_NEEDED COMMAND...: runs COMMAND if it can finish before the deadline
  local name=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "SKIP $name: $(left) s left, it needs about $need" | tee -a "$log"; return; fi
  echo "=== $name ($(left) s left) $(date -u +%T)" | tee -a "$log"
  local t0=$(date +%s)
  timeout --signal=INT $(( $(left) - 3 )) "$@" 2>&1 | tee -a "$log"
  echo "=== $name: rc ${PIPESTATUS[0]}, $(( $(date +%s) - t0 )) s" | tee -a "$log"
  pkill -f "bench_pretraining.py --one" 2>/dev/null  # a configuration cut off by the deadline
}
P="python3 benchmarks/bench_pretraining.py --input_file=$records --steps=20 --timeout=300 --results_jsonl=$out/pretraining.jsonl"

step environment 15 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv;
  python3 -c "import tensorflow as tf, torch, transformers; b = tf.sysconfig.get_build_info()
print(\"tensorflow\", tf.__version__, \"cuda\", b.get(\"cuda_version\"), \"cudnn\", b.get(\"cudnn_version\"),
      \"| torch\", torch.__version__, \"transformers\", transformers.__version__)
print(\"GPUs:\", tf.config.list_physical_devices(\"GPU\"))
import time
a = torch.randn(8192, 8192, device=\"cuda\", dtype=torch.bfloat16); c = a @ a; torch.cuda.synchronize()
t = time.perf_counter(); [a @ a for _ in range(20)]; torch.cuda.synchronize()
print(\"bf16 matmul 8192^3 (torch):\", round(20 * 2 * 8192 ** 3 / (time.perf_counter() - t) / 1e12), \"TFLOP/s\")"'
step "BERT-large seq 128 bf16: ours XLA, HF eager" 150 $P --model=large --batch_size=256 --configs=ours:bfloat16:1,hf:bfloat16:0
step "BERT-large seq 128 bf16: tf-models-official XLA" 90 $P --model=large --batch_size=256 --configs=peer:bfloat16:1
step "GPU tests" 100 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py --junitxml="$out/pytest.xml"
step "BERT-large seq 128 fp16 ours XLA" 90 $P --model=large --batch_size=256 --configs=ours:float16:1
step "BERT-large seq 128 bf16 ours, no XLA" 60 $P --model=large --batch_size=256 --configs=ours:bfloat16:0
step "BERT-large seq 128 bf16 HF torch.compile" 120 $P --model=large --batch_size=256 --configs=hf:bfloat16:1
step "BERT-large seq 128 TF32 ours XLA" 90 $P --model=large --batch_size=256 --configs=ours:float32:1
step "BERT-base seq 128 bf16: ours XLA, HF eager" 120 $P --model=base --batch_size=256 --configs=ours:bfloat16:1,hf:bfloat16:0
echo "=== done, $(left) s left" | tee -a "$log"
