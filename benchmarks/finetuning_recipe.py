"""What every row of the fine-tuning benchmark runs: the implementations, each task's recipe, the learning-rate
sweep, and the keys a row's result is kept under in the results file (benchmarks/FINETUNING.json)."""
import hashlib
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DOC = os.path.join(ROOT, "benchmarks", "FINETUNING.md")
DEFAULT_WORK_DIR = os.path.join(ROOT, "output", "bench_finetuning")
DEFAULT_RESULTS = os.path.join(ROOT, "benchmarks", "FINETUNING.json")  # full-profile results, committed
IMPLS = ("ours", "hf_matched", "hf")
IMPL_NAMES = {"ours": "ours", "hf_matched": "hf, original recipe", "hf": "hf, its defaults"}
# The learning-rate sweep: these tasks, these rates, one seed; each side's best rate then gets the table seeds.
SWEEP_TASKS = ("mrpc", "squad")
SWEEP_LEARNING_RATES = (2e-5, 5e-5, 1e-4)
SWEEP_SEED = 0
DEFAULT_SEEDS = "0,1"

# The recipe. Both sides get exactly these values. GLUE and CoNLL-2003 are the BERT paper's / original README's
# fine-tuning settings, except CoLA's max_seq_length of 64 (its longest sentence is 47 WordPieces, so nothing is
# cut; it only halves the padding); SQuAD is reduced for CPU time (the original: max_seq_length 384, batch 12,
# lr 3e-5, 2 epochs) identically on both sides.
WARMUP_PROPORTION = 0.1     # linear warm-up over the first 10% of the steps, then linear decay to 0
WEIGHT_DECAY = 0.01         # not applied to LayerNorm weights and biases (both sides)
MAX_GRAD_NORM = 1.0         # global-norm clipping (the original's and HF Trainer's)
HF_ADAM_EPSILON = 1e-6      # the original AdamWeightDecay's epsilon (HF Trainer's default would be 1e-8)
EVAL_BATCH_SIZE = 64        # evaluation / prediction batch, both sides (does not change any score)
GLUE = dict(kind="glue", max_seq_length=128, train_batch_size=32, learning_rate=2e-5, num_train_epochs=3.0)
RECIPES = {
    "mrpc": dict(GLUE, name="MRPC", runner_task="MRPC", data_dir="data/glue/MRPC",
                 metrics=("accuracy", "f1"), labels=("0", "1"), columns=(3, 4, 0), header=True),
    "rte": dict(GLUE, name="RTE", runner_task="RTE", data_dir="data/glue/RTE", metrics=("accuracy",),
                labels=("entailment", "not_entailment"), columns=(1, 2, 3), header=True),
    "cola": dict(GLUE, name="CoLA", runner_task="CoLA", data_dir="data/glue/CoLA", metrics=("mcc",),
                 labels=("0", "1"), columns=(3, None, 1), header=False, max_seq_length=64),
    "stsb": dict(GLUE, name="STS-B", runner_task="STS-B", data_dir="data/glue/STS-B",
                 metrics=("pearson", "spearman"), labels=None, columns=(7, 8, 9), header=True),
    "conll2003": dict(kind="ner", name="CoNLL-2003", data_dir="data/conll2003", max_seq_length=128,
                      train_batch_size=32, learning_rate=5e-5, num_train_epochs=3.0, metrics=("f1",)),
    "squad": dict(kind="squad", name="SQuAD 1.1", train_file="data/squad/v1.1/dev-v1.1.articles00-37.json",
                  predict_file="data/squad/v1.1/dev-v1.1.articles38-47.json", max_seq_length=256,
                  doc_stride=128, max_query_length=64, train_batch_size=32, learning_rate=5e-5,
                  num_train_epochs=1.0, n_best_size=20, max_answer_length=30, metrics=("exact_match", "f1")),
}
METRIC_LABELS = {"accuracy": "acc", "f1": "F1", "mcc": "MCC", "pearson": "Pearson", "spearman": "Spearman",
                 "exact_match": "EM"}


def effective_recipe(task, args, learning_rate=None, impl=None):
    """The task's recipe as run: profile limits, --epochs, and learning_rate when given (the sweep); for
    hf_matched on SQuAD also the trained [PAD] embedding (see
    finetuning_original_recipe.train_pad_embedding_like_original)."""
    recipe = dict(RECIPES[task])
    if impl == "hf_matched" and recipe["kind"] == "squad":
        recipe["pad_embedding"] = "trained"
    if learning_rate is not None:
        recipe["learning_rate"] = float(learning_rate)
    recipe.update(warmup_proportion=WARMUP_PROPORTION, weight_decay=WEIGHT_DECAY, max_grad_norm=MAX_GRAD_NORM,
                  hf_adam_epsilon=HF_ADAM_EPSILON, eval_batch_size=EVAL_BATCH_SIZE)
    if args.epochs is not None:
        recipe["num_train_epochs"] = args.epochs
    recipe.update(max_train_examples=args.max_train_examples, max_eval_examples=args.max_eval_examples)
    return recipe


def recipe_key(recipe):
    """The recipe's hash: a kept row counts only while its recipe_key is that of the recipe it would run."""
    return hashlib.sha1(json.dumps(recipe, sort_keys=True, default=list).encode()).hexdigest()[:12]


def profile_name(args):
    """"full", or "smoke-..." naming the limits on examples and epochs."""
    if args.max_train_examples is None and args.max_eval_examples is None and args.epochs is None:
        return "full"
    parts = ["smoke"]
    if args.max_train_examples is not None:
        parts.append(f"train{args.max_train_examples}")
    if args.max_eval_examples is not None:
        parts.append(f"eval{args.max_eval_examples}")
    if args.epochs is not None:
        parts.append(f"ep{args.epochs:g}")
    return "-".join(parts)


def row_key(profile, impl, task, learning_rate, seed):
    """The results file's key of one run: profile/impl/task/learning rate/seed."""
    return f"{profile}/{impl}/{task}/{learning_rate:g}/{seed}"
