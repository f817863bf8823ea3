#!/usr/bin/env bash
# The README's main job: sets up .venv (scripts/setup.sh; BERT_TF_VERSION=2.20 sets up and uses .venv-tf2.20),
# then runs the whole pipeline (main_job.py) on the built-in corpus (Python standard-library docstrings): vocab,
# pre-training data, pre-training, fine-tuning, evaluation, SavedModel export and a raw-text request answered by
# the exported model in a fresh process.
# Extra arguments go to main_job.py, e.g. your own data:
#   bash scripts/main_job.sh --corpus_file=my_corpus.txt --vocab_file=vocab.txt \
#       --init_checkpoint=ckpt/bert_model.ckpt --bert_config_file=ckpt/bert_config.json --task_data_dir=my_task
# (python main_job.py --helpfull lists every flag.)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh" ""  # an argument of its own: this script's go to main_job.py
cd "$ROOT"
exec python main_job.py "$@"
