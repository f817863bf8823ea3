"""Separates SQuAD training from answer selection: a run_squad.py checkpoint scored through the hf rows' windows
and answer selection of bench_finetuning.py (HF tokenizer windows with `stride` as overlap, n-best start x end
over every window, answer text from the offsets), beside run_squad.py's own predictions of the same checkpoint.

    python benchmarks/squad_cross_scoring.py --output_dir=RUN_SQUAD_OUTPUT_DIR --bert_config_file=F \
        --vocab_file=F --predict_file=dev-v1.1.articles38-47.json [--max_seq_length=256 --doc_stride=128]

Same checkpoint, two selections: if the scores agree, the gap between ours and the matched HF row is in training;
if the hf selection scores higher, it is in the windows or the answer selection.
"""
import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def ours_window_logits(task, enc, config, checkpoint):
    """(start logits, end logits) of a run_squad.py checkpoint over HF tokenizer windows (enc), through
    run_squad.py's prediction path (full-length batches, as run_squad.py predicts)."""
    import runner
    arrays = {"unique_ids": np.arange(len(enc["input_ids"])), "input_ids": enc["input_ids"],
              "input_mask": enc["attention_mask"], "segment_ids": enc["token_type_ids"]}
    outputs = runner.predict_arrays(task, {name: np.asarray(value, np.int32) for name, value in arrays.items()},
                                    config, checkpoint_path=checkpoint, real_lengths=False)
    return outputs["start_logits"], outputs["end_logits"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", required=True, help="run_squad.py's --output_dir, with its checkpoint")
    parser.add_argument("--bert_config_file", required=True, help="the run's --bert_config_file")
    parser.add_argument("--vocab_file", required=True, help="the run's --vocab_file (the hf rows' tokenizer reads it)")
    parser.add_argument("--predict_file", required=True)
    parser.add_argument("--max_seq_length", type=int, default=256)
    parser.add_argument("--doc_stride", type=int, default=128)
    parser.add_argument("--n_best_size", type=int, default=20)
    parser.add_argument("--max_answer_length", type=int, default=30)
    args = parser.parse_args(argv)

    import bench_finetuning
    import checkpoints
    import cli
    import modeling
    import run_squad
    import squad_evaluation
    import training

    try:
        checkpoint = checkpoints.CheckpointManager(args.output_dir).latest_checkpoint()
    except cli.UserError as e:
        sys.exit(f"squad_cross_scoring.py: --output_dir={args.output_dir}: {e}")
    ours_predictions = os.path.join(args.output_dir, "predictions.json")
    if not checkpoint or not os.path.exists(ours_predictions):
        sys.exit(f"squad_cross_scoring.py: --output_dir={args.output_dir}: expected run_squad.py's checkpoint and "
                 f"predictions.json there (a run with --do_train --do_predict)")

    recipe = dict(max_seq_length=args.max_seq_length, doc_stride=args.doc_stride, n_best_size=args.n_best_size,
                  max_answer_length=args.max_answer_length)
    tokenizer = bench_finetuning.hf_tokenizer(args.vocab_file)
    examples = bench_finetuning.read_squad(args.predict_file)
    enc = bench_finetuning._squad_encode(recipe, tokenizer, examples)
    print(f"{len(examples)} questions, {len(enc['input_ids'])} hf windows")

    task = run_squad.SquadTask(modeling.BertConfig.from_json_file(args.bert_config_file))
    config = training.TrainingConfig(output_dir=args.output_dir, predict_batch_size=64)
    predictions = bench_finetuning.squad_best_spans(recipe, examples, enc,
                                                    *ours_window_logits(task, enc, config, checkpoint))
    path = os.path.join(args.output_dir, "predictions_hf_selection.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(predictions, f)
    hf_result, _ = squad_evaluation.run(args.predict_file, path)
    ours_result, _ = squad_evaluation.run(args.predict_file, ours_predictions)
    print(f"run_squad.py's selection: EM {ours_result['exact_match']:.2f} F1 {ours_result['f1']:.2f}")
    print(f"hf rows' selection:       EM {hf_result['exact_match']:.2f} F1 {hf_result['f1']:.2f}")


if __name__ == "__main__":
    main()
