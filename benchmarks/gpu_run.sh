#!/usr/bin/env bash
# The GPU session's measurements, in priority order, each skipped when the time left is too short for it.
# Runs on the GPU machine after the kit is unpacked (../shared/gpu/README.md), from the project root:
#
#   . /tmp/gpu-env.sh && bash benchmarks/gpu_run.sh SECONDS DATA_DIR
#
# DATA_DIR holds what ../shared would give (it does not travel): reference/pretraining_data/sample_text_default.tfrecord,
# vocab/uncased/vocab.txt, glue/MRPC/{train,dev}.tsv. Results go to $OUT (or /tmp/gpu-out):
# gpu_run.log (everything printed), pretraining.jsonl (one bench_pretraining result a line), pytest.xml.
set -u
usage="usage: bash benchmarks/gpu_run.sh SECONDS DATA_DIR (see the comment at its top)"
budget=${1:?$usage}; data=${2:?$usage}
[ -d "$data" ] || { echo "gpu_run.sh: DATA_DIR $data is not a folder" >&2; exit 2; }
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
P="python3 benchmarks/bench_pretraining.py --input_file=$records --steps=20 --timeout=240 --hf_pythonpath=
   --results_jsonl=$out/pretraining.jsonl"  # hf without the kit on PYTHONPATH: its stand-in libcusparse breaks torch

step environment 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import tensorflow as tf; b = tf.sysconfig.get_build_info()
print(\"tensorflow\", tf.__version__, \"cuda\", b.get(\"cuda_version\"), \"cudnn\", b.get(\"cudnn_version\"))
print(\"GPUs:\", tf.config.list_physical_devices(\"GPU\"))"
  PYTHONPATH= python3 -c "import time, torch, transformers
print(\"torch\", torch.__version__, \"transformers\", transformers.__version__)
a = torch.randn(8192, 8192, device=\"cuda\", dtype=torch.bfloat16); c = a @ a; torch.cuda.synchronize()
t = time.perf_counter(); [a @ a for _ in range(20)]; torch.cuda.synchronize()
print(\"bf16 matmul 8192^3 (torch):\", round(20 * 2 * 8192 ** 3 / (time.perf_counter() - t) / 1e12), \"TFLOP/s\")"'
step "GPU tests" 90 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py --junitxml="$out/pytest.xml"
step "BERT-large seq 128 bf16, no XLA: ours, tf-models-official, HF eager" 150 $P --model=large --batch_size=256 \
  --configs=ours:bfloat16:0,peer:bfloat16:0,hf:bfloat16:0
step "BERT-large seq 128 fp16 and TF32, no XLA: ours" 100 $P --model=large --batch_size=256 \
  --configs=ours:float16:0,ours:float32:0
# XLA did not finish compiling BERT-base in 48 s nor BERT-large in 300 s on 2026-11-26: time it with the autotuner
# off, then on, on the small model first (a timed-out configuration prints its last output).
step "BERT-base seq 128 bf16 XLA, autotune off" 120 env XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0" \
  $P --model=base --batch_size=256 --configs=ours:bfloat16:1
step "BERT-base seq 128 bf16 XLA" 120 $P --model=base --batch_size=256 --configs=ours:bfloat16:1
step "BERT-large seq 128 bf16 HF torch.compile" 120 $P --model=large --batch_size=256 --configs=hf:bfloat16:1
# Fine-tuning as a user runs it: run_classifier.py on MRPC with a BERT-base-sized config (random weights; speed
# only), seq 128, batch 32, bf16; the last log line's examples/s is steady (loops of 20 steps, one checkpoint).
python3 -c "import json, sys; sys.path.insert(0, 'benchmarks'); import bench_pretraining as b
json.dump(b.BERT_BASE, open('/tmp/bert_base_config.json', 'w'))"
step "MRPC fine-tuning, BERT-base bf16" 120 python3 run_classifier.py --task_name=MRPC --do_train=true \
  --data_dir=$data/glue/MRPC --vocab_file=$data/vocab/uncased/vocab.txt --bert_config_file=/tmp/bert_base_config.json \
  --max_seq_length=128 --train_batch_size=32 --num_train_epochs=1 --learning_rate=2e-5 --dtype=bfloat16 \
  --iterations_per_loop=20 --save_checkpoints_steps=100000 --output_dir=/tmp/mrpc_gpu
step "BERT-base seq 128 bf16, no XLA: ours, HF eager" 90 $P --model=base --batch_size=256 \
  --configs=ours:bfloat16:0,hf:bfloat16:0
echo "=== done, $(left) s left" | tee -a "$log"
