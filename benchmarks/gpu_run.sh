#!/usr/bin/env bash
# The GPU session's measurements, in priority order, each skipped when the time left is too short for it.
# Runs on the GPU machine after the kit is unpacked (../shared/gpu/README.md), from the project root:
#
#   . /tmp/gpu-env.sh && bash benchmarks/gpu_run.sh SECONDS DATA_DIR [STEP ...]
#
# STEPs (default: all, in the order below) pick the steps by their ids, e.g. `serving squad` for what an earlier
# session left unmeasured; `bash benchmarks/gpu_run.sh --list` prints them.
# DATA_DIR holds what ../shared would give (it does not travel): reference/pretraining_data/sample_text_default.tfrecord,
# vocab/uncased/vocab.txt, glue/MRPC/{train,dev}.tsv, squad/v1.1/dev-v1.1.articles38-47.json and
# pretraining_seq512.tfrecord (benchmarks/GPU.md says how it is made). Results go to $OUT (or /tmp/gpu-out):
# gpu_run.log (everything printed), pretraining.jsonl (one bench_pretraining result a line), pytest.xml,
# profile_summary.json and the profile step's trace (*.xplane.pb).
# GPU_RUN_CONFIG=bert_config.json replaces the BERT-base config of the fine-tuning and serving steps and the
# BERT-large one of the profile step (a small one checks those steps on a CPU).
set -u
STEPS="environment tests large large-fp16-tf32 xla-autotune-off xla-no-triton xla large-xla profile hf-compile"
STEPS="$STEPS mrpc serving encoder squad base base-seq512"
if [ "${1:-}" = "--list" ]; then echo "$STEPS"; exit 0; fi
usage="usage: bash benchmarks/gpu_run.sh SECONDS DATA_DIR [STEP ...] (see the comment at its top; --list: the steps)"
budget=${1:?$usage}; data=${2:?$usage}; shift 2
[ -d "$data" ] || { echo "gpu_run.sh: DATA_DIR $data is not a folder" >&2; exit 2; }
wanted=${*:-$STEPS}
for id in $wanted; do
  case " $STEPS " in *" $id "*) ;; *) echo "gpu_run.sh: unknown STEP $id; expected some of: $STEPS" >&2; exit 2;; esac
done
deadline=$(( $(date +%s) + budget ))
out=${OUT:-/tmp/gpu-out}; mkdir -p "$out"
log=$out/gpu_run.log
export BERT_SHARED_DIR=$data PYTHONUNBUFFERED=1
records=$data/reference/pretraining_data/sample_text_default.tfrecord  # 118 records, repeated
vocab=$data/vocab/uncased/vocab.txt

left() { echo $(( deadline - $(date +%s) )); }
step() {  # step ID NAME SECONDS_NEEDED COMMAND...: runs COMMAND if ID is wanted and can finish before the deadline
  local id=$1 name=$2 need=$3; shift 3
  case " $wanted " in *" $id "*) ;; *) return;; esac
  if [ "$(left)" -lt "$need" ]; then echo "SKIP $id: $name: $(left) s left, it needs about $need" | tee -a "$log"; return; fi
  echo "=== $id: $name ($(left) s left) $(date -u +%T)" | tee -a "$log"
  local t0=$(date +%s)
  timeout --signal=INT $(( $(left) - 3 )) "$@" 2>&1 | tee -a "$log"
  echo "=== $id: rc ${PIPESTATUS[0]}, $(( $(date +%s) - t0 )) s" | tee -a "$log"
  pkill -f "bench_(pretraining|inference).py --one" 2>/dev/null  # a configuration cut off by the deadline
}
P="python3 benchmarks/bench_pretraining.py --input_file=$records --steps=20 --timeout=240 --hf_pythonpath=
   --results_jsonl=$out/pretraining.jsonl"  # hf without the kit on PYTHONPATH: its stand-in libcusparse breaks torch

# bert_config.json files for the steps that run the runners: BERT-large (profile), BERT-base (fine-tuning, serving).
profile_config=${GPU_RUN_CONFIG:-/tmp/bert_large_config.json}
config=${GPU_RUN_CONFIG:-/tmp/bert_base_config.json}
[ -n "${GPU_RUN_CONFIG:-}" ] || python3 -c "import json, sys; sys.path.insert(0, 'benchmarks'); import bench_pretraining as b
json.dump(b.BERT_LARGE, open('$profile_config', 'w')); json.dump(b.BERT_BASE, open('$config', 'w'))"

step environment environment 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import tensorflow as tf; b = tf.sysconfig.get_build_info()
print(\"tensorflow\", tf.__version__, \"cuda\", b.get(\"cuda_version\"), \"cudnn\", b.get(\"cudnn_version\"))
print(\"GPUs:\", tf.config.list_physical_devices(\"GPU\"))"
  PYTHONPATH= python3 -c "import time, torch, transformers
print(\"torch\", torch.__version__, \"transformers\", transformers.__version__)
a = torch.randn(8192, 8192, device=\"cuda\", dtype=torch.bfloat16); c = a @ a; torch.cuda.synchronize()
t = time.perf_counter(); [a @ a for _ in range(20)]; torch.cuda.synchronize()
print(\"bf16 matmul 8192^3 (torch):\", round(20 * 2 * 8192 ** 3 / (time.perf_counter() - t) / 1e12), \"TFLOP/s\")"'
step tests "GPU tests" 90 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py --junitxml="$out/pytest.xml"
# BERT-large at batch 128: at 256, ours, tf-models-official and HF all ran out of an H100's 80 GB (2026-11-26).
step large "BERT-large seq 128 bf16, no XLA: ours, tf-models-official, HF eager" 150 $P --model=large \
  --batch_size=128 --configs=ours:bfloat16:0,peer:bfloat16:0,hf:bfloat16:0
step large-fp16-tf32 "BERT-large seq 128 fp16 and TF32, no XLA: ours" 100 $P --model=large --batch_size=128 \
  --configs=ours:float16:0,ours:float32:0
# XLA did not finish compiling BERT-base in 48 s nor BERT-large in 300 s on an H200; with the autotuner off,
# BERT-base compiled and ran on an H100 (2026-11-26). A timed-out configuration prints its last output.
step xla-autotune-off "BERT-base seq 128 bf16 XLA, autotune off" 120 \
  env XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0" $P --model=base --batch_size=256 --configs=ours:bfloat16:1
# cuBLAS instead of Triton GEMM fusions, whose autotuning compiles many kernel variants (each through ptxas).
step xla-no-triton "BERT-base seq 128 bf16 XLA, no Triton GEMM" 120 \
  env XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_triton_gemm=false" $P --model=base --batch_size=256 \
  --configs=ours:bfloat16:1
step xla "BERT-base seq 128 bf16 XLA" 120 $P --model=base --batch_size=256 --configs=ours:bfloat16:1
# BERT-large with XLA and cuBLAS GEMMs (the default Triton GEMM autotuning did not compile BERT-base in 240 s on
# the H100): ours ran 1,108 examples/s in 105 s of wall time; then tf-models-official with XLA beside it.
step large-xla "BERT-large seq 128 bf16 XLA, no Triton GEMM: ours, tf-models-official" 300 \
  env XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_triton_gemm=false" $P --model=large --batch_size=128 \
  --configs=ours:bfloat16:1,peer:bfloat16:1
# A tf.profiler trace of BERT-large bf16 without XLA (ours at half HF eager's speed there): one loop of 2 steps,
# after a first loop that traces and compiles, summarized by op type and kernel; the trace itself comes back too.
step profile "Profile of BERT-large seq 128 bf16, no XLA: ours, batch 128" 120 bash -c "rm -rf /tmp/profile_gpu &&
  python3 run_pretraining.py --do_train=true --input_file=$records --output_dir=/tmp/profile_gpu \
    --bert_config_file=$profile_config --train_batch_size=128 --max_seq_length=128 \
    --max_predictions_per_seq=20 --num_train_steps=4 --num_warmup_steps=0 --iterations_per_loop=2 \
    --save_checkpoints_steps=100000 --dtype=bfloat16 --profile_loop=2 &&
  python3 benchmarks/profile_summary.py /tmp/profile_gpu --top=25 --json=$out/profile_summary.json &&
  cp /tmp/profile_gpu/plugins/profile/*/*.xplane.pb $out/"
step hf-compile "BERT-large seq 128 bf16 HF torch.compile" 120 $P --model=large --batch_size=128 \
  --configs=hf:bfloat16:1
# Fine-tuning and serving as a user runs them, with a BERT-base-sized config and random weights (speed only).
rm -rf /tmp/mrpc_gpu /tmp/squad_gpu  # a finished run there would only be resumed
# run_classifier.py on MRPC, seq 128, batch 32, bf16: the last log line's examples/s is steady (loops of 20 steps).
step mrpc "MRPC fine-tuning, BERT-base bf16" 120 python3 run_classifier.py --task_name=MRPC --do_train=true \
  --data_dir=$data/glue/MRPC --vocab_file=$vocab --bert_config_file=$config --max_seq_length=128 \
  --train_batch_size=32 --num_train_epochs=1 --learning_rate=2e-5 --dtype=bfloat16 --iterations_per_loop=20 \
  --save_checkpoints_steps=100000 --output_dir=/tmp/mrpc_gpu
# The exported classifier (float32, as every export; one training step makes its checkpoint): serving_default and
# serving_text at batch 1, 8 and 32.
step serving "BERT-base classifier SavedModel served, batch 1 / 8 / 32" 150 bash -c "rm -rf /tmp/serving_gpu &&
  python3 run_classifier.py --task_name=MRPC --do_train=true --num_train_epochs=0.01 --data_dir=$data/glue/MRPC \
    --vocab_file=$vocab --bert_config_file=$config --max_seq_length=128 --train_batch_size=32 \
    --output_dir=/tmp/serving_gpu --export_dir=/tmp/serving_gpu/saved_model &&
  python3 benchmarks/bench_inference.py --parts=savedmodel --export_dir=/tmp/serving_gpu/saved_model \
    --vocab_file=$vocab --mrpc_dir=$data/glue/MRPC --batch_sizes=1,8,32 --rounds=5 --min_round_s=1 --timeout=300"
# What half precision would buy the served model (exports are float32): BERT-base encoder, ours and
# tf-models-official, float32 (TF32) and mixed bfloat16, batch 1 / 8 / 32, seq 128.
step encoder "BERT-base encoder inference, ours and tf-models-official, fp32 and bf16" 150 \
  python3 benchmarks/bench_inference.py --parts=encoder --impls=ours,peer --dtypes=float32,bfloat16 \
    --batch_sizes=1,8,32 --rounds=5 --min_round_s=1 --timeout=120
# run_squad.py, seq 384, batch 32, bf16, on 10 SQuAD articles (dev questions, the first answer; speed only).
step squad "SQuAD fine-tuning, BERT-base bf16, seq 384" 150 python3 run_squad.py --do_train=true \
  --train_file=$data/squad/v1.1/dev-v1.1.articles38-47.json --train_first_answer=true --vocab_file=$vocab \
  --bert_config_file=$config \
  --max_seq_length=384 --doc_stride=128 --train_batch_size=32 --num_train_epochs=2 --learning_rate=5e-5 \
  --dtype=bfloat16 --iterations_per_loop=10 --save_checkpoints_steps=100000 --output_dir=/tmp/squad_gpu
step base "BERT-base seq 128 bf16, no XLA: ours, HF eager" 90 $P --model=base --batch_size=256 \
  --configs=ours:bfloat16:0,hf:bfloat16:0
step base-seq512 "BERT-base seq 512 bf16, no XLA: ours, HF eager" 90 $P --model=base --batch_size=64 \
  --max_seq_length=512 --max_predictions_per_seq=80 --input_file=$data/pretraining_seq512.tfrecord \
  --configs=ours:bfloat16:0,hf:bfloat16:0
echo "=== done, $(left) s left" | tee -a "$log"
