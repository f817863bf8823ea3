#!/usr/bin/env bash
# The GPU session's measurements, in priority order, each skipped when the time left is too short for it, with
# the project's defaults (no XLA_FLAGS set by hand: the project sets XLA's options itself, device_setup.py).
# Runs on the GPU machine after the kit is unpacked (../shared/gpu/README.md), from the project root:
#
#   . /tmp/gpu-env.sh && bash benchmarks/gpu_run.sh SECONDS DATA_DIR [STEP ...]
#   bash benchmarks/gpu_run.sh --dry-run [STEP ...]   # every step on this CPU: tiny config, a few steps
#   bash benchmarks/gpu_run.sh --make-data DATA_DIR   # DATA_DIR from ../shared (or $BERT_SHARED_DIR)
#   bash benchmarks/gpu_run.sh --list                 # the steps, in the order they run
#
# STEPs (default: all, always in the order of STEPS) pick some, e.g. what an earlier session left unmeasured.
# DATA_DIR holds what ../shared would give (../shared does not travel): --make-data writes it (small: send it
# with every call that runs this script). Results go to $OUT (default /tmp/gpu-out; --dry-run: /tmp/gpu-out-dry):
# gpu_run.log (everything printed), rows/STEP.jsonl (each tool's results), environment.json, GPU.json (this run's
# rows: benchmarks/gpu_report.py), pytest.xml, the profile step's summary and trace, extra.tgz (rows/, the
# configs; at its end, so that what the device returns stays within 8 files). A real run also merges its
# rows into benchmarks/GPU.json and regenerates benchmarks/GPU.md (on the GPU machine that is the tree's copy:
# bring $OUT/GPU.json back and run `python benchmarks/gpu_report.py --merge $OUT/GPU.json` here).
set -u
STEPS="environment tests large-bf16 serving large-seq512 large-fp16 large-tf32 base-bf16 base-seq512"
STEPS="$STEPS finetune-mrpc finetune-squad precision large-eager encoder profile"
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
shared=${BERT_SHARED_DIR:-$root/../shared}

make_data() {  # make_data DEST: the files the steps read, from ../shared, and the seq-512 pre-training records
  local dest=$1
  mkdir -p "$dest/reference/pretraining_data" "$dest/vocab/uncased" "$dest/glue/MRPC" "$dest/squad/v1.1" || return 2
  cp "$shared/reference/pretraining_data/sample_text_default.tfrecord" "$dest/reference/pretraining_data/" &&
  cp "$shared/vocab/uncased/vocab.txt" "$dest/vocab/uncased/" &&
  cp "$shared/data/glue/MRPC/train.tsv" "$shared/data/glue/MRPC/dev.tsv" "$dest/glue/MRPC/" &&
  cp "$shared/data/squad/v1.1/dev-v1.1.articles38-47.json" "$dest/squad/v1.1/" || return 2
  [ -f "$dest/pretraining_seq512.tfrecord" ] || python3 "$root/create_pretraining_data.py" \
    --input_file="$shared/data/text/sample_text.txt" --output_file="$dest/pretraining_seq512.tfrecord" \
    --vocab_file="$shared/vocab/uncased/vocab.txt" --max_seq_length=512 --max_predictions_per_seq=80 \
    --dupe_factor=10 > "$dest/create_pretraining_data.log" 2>&1 || { cat "$dest/create_pretraining_data.log"; return 2; }
  rm -f "$dest/create_pretraining_data.log"
  echo "gpu_run.sh: data in $dest ($(du -sh "$dest" | cut -f1))"
}

case "${1:-}" in
  --list) echo "$STEPS"; exit 0 ;;
  --make-data) make_data "${2:?usage: bash benchmarks/gpu_run.sh --make-data DATA_DIR}"; exit $? ;;
esac
usage="usage: bash benchmarks/gpu_run.sh SECONDS DATA_DIR [STEP ...] | --dry-run [STEP ...] (see its top comment)"
dry=0
if [ "${1:-}" = "--dry-run" ]; then
  dry=1; shift
  budget=100000; out=${OUT:-/tmp/gpu-out-dry}; data=$out/data
  [ -f "$data/pretraining_seq512.tfrecord" ] || make_data "$data" > /dev/null || exit 2
else
  budget=${1:?$usage}; data=${2:?$usage}; shift 2; out=${OUT:-/tmp/gpu-out}
  [ -d "$data" ] || { echo "gpu_run.sh: DATA_DIR $data is not a folder (bash benchmarks/gpu_run.sh --make-data DIR)" >&2; exit 2; }
fi
wanted=${*:-$STEPS}
for id in $wanted; do
  case " $STEPS " in *" $id "*) ;; *) echo "gpu_run.sh: unknown STEP $id; expected some of: $STEPS" >&2; exit 2;; esac
done
cd "$root"
deadline=$(( $(date +%s) + budget ))
mkdir -p "$out/rows"
log=$out/gpu_run.log
export BERT_SHARED_DIR=$data PYTHONUNBUFFERED=1
records=$data/reference/pretraining_data/sample_text_default.tfrecord  # 118 records, repeated
records512=$data/pretraining_seq512.tfrecord
vocab=$data/vocab/uncased/vocab.txt

# The sizes of a real run, and of a dry run (a tiny BERT, a few steps, small batches: checks, not numbers).
if [ $dry = 1 ]; then
  large=tiny; base=tiny; b_large=4; b_base=4; b_large512=2; b_base512=2; b_finetune=4; steps=2; t=600
  epochs=0.02; serving_batches=1,4; rounds="--rounds=1 --min_round_s=0"; seq_squad=128
else
  large=large; base=base; b_large=128; b_base=256; b_large512=32; b_base512=64; b_finetune=32; steps=20; t=300
  epochs=1; serving_batches=1,8,32; rounds="--rounds=3 --min_round_s=0.5"; seq_squad=384
fi
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import json, bench_pretraining as b
for name, model in (('large', '$large'), ('base', '$base')):
    json.dump(b.MODELS[model], open('$out/bert_' + name + '_config.json', 'w'))"
large_config=$out/bert_large_config.json; base_config=$out/bert_base_config.json

left() { echo $(( deadline - $(date +%s) )); }
report() {  # this run's GPU.json from its rows so far (a run cut short keeps what it measured)
  python3 benchmarks/gpu_report.py --run "$out" $([ $dry = 1 ] && echo --dry) >> "$log" 2>&1 ||
    echo "gpu_run.sh: gpu_report.py failed (see $log)" >&2
}
step() {  # step ID NAME SECONDS_NEEDED COMMAND...: runs COMMAND if ID is wanted and can finish before the deadline
  local id=$1 name=$2 need=$3; shift 3
  case " $wanted " in *" $id "*) ;; *) return;; esac
  if [ "$(left)" -lt "$need" ]; then echo "SKIP $id: $name: $(left) s left, it needs about $need" | tee -a "$log"; return; fi
  echo "=== $id: $name ($(left) s left) $(date -u +%T)" | tee -a "$log"
  local t0=$(date +%s)
  # timeout signals the step's whole process group (the benchmarks' child processes too), then kills it.
  STEP_ROWS=$out/rows/$id.jsonl timeout --signal=INT --kill-after=15 $(( $(left) - 3 )) "$@" 2>&1 | tee -a "$log"
  echo "=== $id: rc ${PIPESTATUS[0]}, $(( $(date +%s) - t0 )) s" | tee -a "$log"
  report
}
peak_tflops() { python3 -c "import json; print(json.load(open('$out/environment.json')).get('peak_tflops') or '')" 2>/dev/null; }
has_peer() { python3 -c "import json; print(int(json.load(open('$out/environment.json')).get('peer', False)))" 2>/dev/null || echo 0; }
pretrain() {  # pretrain MODEL BATCH SEQ CONFIGS [FLAG...]: bench_pretraining.py; peer configs only where it is installed
  local model=$1 batch=$2 seq=$3 configs=$4 input=$records preds=20; shift 4
  [ "$seq" = 512 ] && { input=$records512; preds=80; }
  [ "$(has_peer)" = 1 ] || configs=$(echo "$configs" | tr , '\n' | grep -v '^peer:' | paste -sd, -)
  local peak; peak=$(peak_tflops)
  python3 benchmarks/bench_pretraining.py --input_file="$input" --model="$model" --batch_size="$batch" \
    --max_seq_length="$seq" --max_predictions_per_seq=$preds --steps=$steps --timeout=$t --hf_pythonpath= \
    --results_jsonl="$STEP_ROWS" ${peak:+--peak_tflops=$peak} --configs="$configs" "$@"
}
export -f pretrain peak_tflops has_peer
export out records records512 steps t

# 1. The machine: nvidia-smi, TensorFlow's build and devices, torch's bf16 matmul peak (MFU is taken against it),
#    whether the peer tf-models-official is installed (the TensorFlow 2.20 kit built --with-peer has it).
step environment "machine, versions, bf16 matmul peak" 40 python3 benchmarks/gpu_report.py --environment "$out" \
  $([ $dry = 1 ] && echo --dry)
# 2. The GPU tests (tests/test_gpu.py; skipped without a GPU).
step tests "GPU tests" 120 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py --junitxml="$out/pytest.xml"
# 3. The issue's row: BERT-large seq 128 bf16, each side at its best: ours with the project's defaults (XLA on a
#    GPU), tf-models-official with XLA, HF with torch.compile. H100: ours took 105 s (XLA, cuBLAS GEMMs).
step large-bf16 "BERT-large seq 128 bf16: ours (XLA), tf-models-official (XLA), HF (torch.compile)" 330 \
  bash -c "pretrain $large $b_large 128 ours:bfloat16:1,peer:bfloat16:1,hf:bfloat16:1"
# 4. Serving: a BERT-base classifier (random weights and one training step: a checkpoint) exported four ways by run_classifier.py
#    (float32; float32, bfloat16, float16 under XLA at padded shapes), each served at batch 1 / 8 / 32 through
#    serving_default and serving_text (MRPC dev pairs; their labels against the float32 export's).
serve() {
  local name=$1; shift
  rm -rf "$out/serving/$name"
  python3 run_classifier.py --task_name=MRPC --vocab_file="$vocab" --bert_config_file="$base_config" \
    --max_seq_length=128 --output_dir="$out/serving/output" --export_dir="$out/serving/$name" "$@" &&
  python3 benchmarks/bench_inference.py --parts=savedmodel --export_dir="$out/serving/$name" --vocab_file="$vocab" \
    --mrpc_dir="$data/glue/MRPC" --batch_sizes=$serving_batches $rounds --timeout=$t --results_jsonl="$STEP_ROWS" \
    --variant="$name"
}
export -f serve
export vocab base_config data serving_batches rounds
step serving "BERT-base classifier served: float32, and float32 / bfloat16 / float16 under XLA" 240 bash -c "
  rm -rf $out/serving && python3 run_classifier.py --task_name=MRPC --do_train=true --num_train_epochs=0.01 \
    --data_dir=$data/glue/MRPC --vocab_file=$vocab --bert_config_file=$base_config --max_seq_length=128 \
    --train_batch_size=32 --use_xla=false --output_dir=$out/serving/output > $out/serving_checkpoint.log 2>&1 &&
  serve float32 --use_xla=false; serve xla-float32 --use_xla=true; serve xla-bfloat16 --use_xla=true \
    --export_dtype=bfloat16; serve xla-float16 --use_xla=true --export_dtype=float16"
# 5.-9. More pre-training rows: seq 512, fp16 (dynamic loss scaling) and TF32, BERT-base.
step large-seq512 "BERT-large seq 512 bf16: ours, tf-models-official, HF" 330 \
  bash -c "pretrain $large $b_large512 512 ours:bfloat16:1,peer:bfloat16:1,hf:bfloat16:1"
step large-fp16 "BERT-large seq 128 fp16 (dynamic loss scaling): ours, tf-models-official, HF" 330 \
  bash -c "pretrain $large $b_large 128 ours:float16:1,peer:float16:1,hf:float16:1"
step large-tf32 "BERT-large seq 128 TF32: ours, tf-models-official, HF" 330 \
  bash -c "pretrain $large $b_large 128 ours:float32:1,peer:float32:1,hf:float32:1"
step base-bf16 "BERT-base seq 128 bf16: ours, tf-models-official, HF" 240 \
  bash -c "pretrain $base $b_base 128 ours:bfloat16:1,peer:bfloat16:1,hf:bfloat16:1"
step base-seq512 "BERT-base seq 512 bf16: ours, tf-models-official, HF" 240 \
  bash -c "pretrain $base $b_base512 512 ours:bfloat16:1,peer:bfloat16:1,hf:bfloat16:1"
# 10.-11. Fine-tuning speed as a user runs it (run_classifier.py MRPC seq 128, run_squad.py seq 384), beside HF.
finetune() {
  python3 benchmarks/bench_finetuning_speed.py --vocab_file="$vocab" --model="$base" --batch_size=$b_finetune \
    --steps=$steps --num_train_epochs=$epochs --timeout=$t --hf_pythonpath= --results_jsonl="$STEP_ROWS" \
    --configs=ours:bfloat16:1,hf:bfloat16:1 "$@"
}
export -f finetune
export base b_finetune epochs
step finetune-mrpc "MRPC fine-tuning speed, BERT-base bf16: run_classifier.py, HF" 150 \
  bash -c "finetune --task=mrpc --data=$data/glue/MRPC"
step finetune-squad "SQuAD fine-tuning speed, BERT-base bf16 seq $seq_squad: run_squad.py, HF" 180 \
  bash -c "finetune --task=squad --data=$data/squad/v1.1/dev-v1.1.articles38-47.json --max_seq_length=$seq_squad"
# 12.-13. Without XLA: ours under each elementwise dtype (--elementwise_dtype: float32, the CPU's, or compute, bf16,
#    a GPU's default), and the peers eager (ours measured at 277 examples/s, HF 550 on the H100).
step precision "BERT-large seq 128 bf16 without XLA: ours with elementwise work in float32, then in bf16" 150 \
  bash -c "pretrain $large $b_large 128 ours:bfloat16:0 --elementwise_dtype=float32 &&
           pretrain $large $b_large 128 ours:bfloat16:0 --elementwise_dtype=compute"
step large-eager "BERT-large seq 128 bf16 without XLA: ours, tf-models-official, HF eager" 200 \
  bash -c "pretrain $large $b_large 128 peer:bfloat16:0,hf:bfloat16:0"
# 14. The encoder alone, inference: ours and tf-models-official, float32 (TF32) and bf16, batch 1 / 8 / 32.
step encoder "BERT-base encoder inference: ours, tf-models-official, fp32 and bf16" 150 bash -c "
  impls=ours; [ \$(has_peer) = 1 ] && impls=ours,peer
  python3 benchmarks/bench_inference.py --parts=encoder --impls=\$impls --dtypes=float32,bfloat16 \
    --batch_sizes=$serving_batches $rounds --timeout=$t --results_jsonl=\$STEP_ROWS --variant=encoder \
    $([ $dry = 1 ] && echo '--layers=2 --hidden=32 --heads=2')"
# 15. A tf.profiler trace of ours, BERT-large bf16 with the project's defaults (XLA on a GPU): two loops of 2 steps,
#    the second traced, summarized by op and kernel (benchmarks/profile_summary.py); the trace comes back in $OUT.
step profile "Profile of BERT-large seq 128 bf16, ours with the project's defaults" 150 bash -c "
  rm -rf $out/profile && python3 run_pretraining.py --do_train=true --input_file=$records --output_dir=$out/profile \
    --bert_config_file=$large_config --train_batch_size=$b_large --max_seq_length=128 --max_predictions_per_seq=20 \
    --num_train_steps=4 --num_warmup_steps=0 --iterations_per_loop=2 --save_checkpoints_steps=100000 \
    --dtype=bfloat16 --profile_loop=2 &&
  python3 benchmarks/profile_summary.py $out/profile --top=25 --json=$out/profile_summary.json &&
  cp $out/profile/plugins/profile/*/*.xplane.pb $out/"
report
[ $dry = 1 ] || python3 benchmarks/gpu_report.py --merge "$out/GPU.json" >> "$log" 2>&1
# At most 8 files come back from the device machine, none deeper than 2 folders: the rows, the configs and the
# serving checkpoint's log go into extra.tgz; the jobs' checkpoints and exports (profile/, serving/) are dropped.
(cd "$out" && tar czf extra.tgz $(ls -d rows bert_*_config.json serving_checkpoint.log 2>/dev/null) &&
  rm -rf rows bert_*_config.json serving_checkpoint.log profile serving)
echo "=== done, $(left) s left; rows: $out/GPU.json; back: $(cd "$out" && ls | grep -v '^data$' | paste -sd' ')" |
  tee -a "$log"
