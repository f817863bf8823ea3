"""The `hf` and `hf_matched` rows: HF transformers (PyTorch, CPU) fine-tuned in a child process
(`bench_finetuning.py --hf_child=SPEC.json`, which never imports TensorFlow) that writes predictions; this process
scores them with the project's evaluators, as ours' rows are scored.

`hf` trains with HF's own AdamW and schedule; `hf_matched` with the original recipe (finetuning_original_recipe).
Per task: the training set and collation (`_hf_*_setup`), and the predictions the evaluators read
(`_hf_*_predict`)."""
import csv
import importlib.util
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time

import finetuning_process as process
from finetuning_original_recipe import (OriginalAdamWeightDecay, OriginalSchedule, decays, init_head_like_original,
                                        original_batches, original_step_counts, train_pad_embedding_like_original)
from finetuning_recipe import EVAL_BATCH_SIZE, HF_ADAM_EPSILON, MAX_GRAD_NORM, ROOT, WARMUP_PROPORTION, WEIGHT_DECAY

CHILD_SCRIPT = os.path.join(ROOT, "benchmarks", "bench_finetuning.py")  # the command whose --hf_child runs hf_child


def hf_child(spec_path):
    """Fine-tunes and predicts with HF transformers; writes predictions and hf_result.json into the run dir.

    spec["impl"] picks the recipe: "hf" (HF's own: torch AdamW with bias correction, its linear schedule,
    ceil() counts, the last partial batch kept) or "hf_matched" (the original's: OriginalAdamWeightDecay, the
    original schedule and step counts: finetuning_original_recipe).
    """
    with open(spec_path) as f:
        spec = json.load(f)
    import numpy as np
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    recipe, seed, run_dir = spec["recipe"], spec["seed"], spec["run_dir"]
    matched = spec.get("impl", "hf") == "hf_matched"
    transformers.set_seed(seed)
    tokenizer = hf_tokenizer(os.path.join(spec["model_dir"], "vocab.txt"))
    kind = recipe["kind"]
    info = {}
    if kind == "glue":
        model, train_set, collate = _hf_glue_setup(spec, recipe, tokenizer, info)
    elif kind == "ner":
        model, train_set, collate = _hf_ner_setup(spec, recipe, tokenizer, info)
    else:
        model, train_set, collate = _hf_squad_setup(spec, recipe, tokenizer, info)
    generator = torch.Generator().manual_seed(seed)
    batch_size, epochs = recipe["train_batch_size"], spec["epochs"]
    named = list(model.named_parameters())
    if matched:
        init_head_like_original(model, generator)
        if recipe.get("pad_embedding") == "trained":
            train_pad_embedding_like_original(model)
        # The original counts an epoch in training examples (SQuAD: questions, not windows).
        num_examples = info.get("train_examples", len(train_set))
        total_steps, warmup_steps = original_step_counts(num_examples, batch_size, epochs)
        batches = original_batches(len(train_set), batch_size, total_steps, generator)
        loader = ([train_set[i] for i in indices] for indices in batches)
        optimizer = OriginalAdamWeightDecay(named, weight_decay_rate=WEIGHT_DECAY)
        schedule = OriginalSchedule(recipe["learning_rate"], total_steps, warmup_steps)
    else:
        data_loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True,
                                                  generator=generator, collate_fn=collate)
        total_steps = int(math.ceil(len(data_loader) * epochs))
        warmup_steps = int(math.ceil(total_steps * WARMUP_PROPORTION))
        loader = (batch for _ in range(int(math.ceil(epochs))) for batch in data_loader)
        no_decay_ids = {id(p) for n, p in named if not decays(n)}
        optimizer = torch.optim.AdamW(
            [{"params": [p for _, p in named if id(p) not in no_decay_ids], "weight_decay": WEIGHT_DECAY},
             {"params": [p for _, p in named if id(p) in no_decay_ids], "weight_decay": 0.0}],
            lr=recipe["learning_rate"], betas=(0.9, 0.999), eps=HF_ADAM_EPSILON, fused=True)
        scheduler = transformers.get_linear_schedule_with_warmup(optimizer, warmup_steps, total_steps)
    model.train()
    step, examples, losses = 0, 0, []
    start = time.time()
    for batch in loader:
        if step >= total_steps:
            break
        if matched:
            batch = collate(batch)
        loss = model(**batch).loss
        loss.backward()
        if matched:
            optimizer.step(schedule(step))
            optimizer.zero_grad()
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        examples += batch["input_ids"].shape[0]
        step += 1
        if step % 50 == 0:
            print(f"step {step}/{total_steps}: loss {np.mean(losses[-50:]):.4f}, "
                  f"{examples / (time.time() - start):.1f} examples/s", flush=True)
    train_loop_s = time.time() - start
    model.eval()
    if kind == "glue":
        _hf_glue_predict(spec, recipe, tokenizer, model)
    elif kind == "ner":
        _hf_ner_predict(spec, recipe, tokenizer, model, info)
    else:
        _hf_squad_predict(spec, recipe, tokenizer, model, info)
    info.update(train_loop_s=train_loop_s, train_steps=total_steps, train_steps_done=step,
                train_examples_per_sec=examples / max(train_loop_s, 1e-9), warmup_steps=warmup_steps,
                train_loss_mean=float(np.mean(losses)) if losses else None,
                attn_implementation=getattr(model.config, "_attn_implementation", None))
    with open(os.path.join(run_dir, "hf_result.json"), "w") as f:
        json.dump(info, f)


def hf_tokenizer(vocab_path):
    """BertTokenizerFast on vocab.txt, lower case; checked to use that vocabulary.

    The path is passed positionally: transformers 5 names the parameter `vocab` (4.x: `vocab_file`) and
    silently builds a 5-token vocabulary (everything [UNK]) from an unknown `vocab_file=` keyword.
    """
    import transformers
    tokenizer = transformers.BertTokenizerFast(vocab_path, do_lower_case=True)
    with open(vocab_path, encoding="utf-8") as f:
        vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
    probe = tokenizer("The Hello", add_special_tokens=True)["input_ids"]
    expected = [vocab["[CLS]"], vocab["the"], vocab["hello"], vocab["[SEP]"]]
    if len(tokenizer) != len(vocab) or probe != expected:
        raise RuntimeError(f"BertTokenizerFast({vocab_path}) does not use that vocabulary: {len(tokenizer)} tokens, "
                           f"'The Hello' -> {probe}, expected {expected}")
    return tokenizer


def _pretrained(cls, spec, **kwargs):
    import torch
    return cls.from_pretrained(spec["model_dir"], dtype=torch.float32, **kwargs)


def read_tsv(path):
    """Rows of a GLUE TSV, quoting off (as the original's reader)."""
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quotechar=None, quoting=csv.QUOTE_NONE))


def _glue_examples(recipe, path):
    a, b, y = recipe["columns"]
    rows = read_tsv(path)[1 if recipe["header"] else 0:]
    texts_a = [row[a] for row in rows]
    texts_b = [row[b] for row in rows] if b is not None else None
    if recipe["labels"] is None:
        labels = [float(row[y]) for row in rows]
    else:
        labels = [recipe["labels"].index(row[y]) for row in rows]
    return texts_a, texts_b, labels


def _glue_tensors(recipe, tokenizer, path):
    import torch
    texts_a, texts_b, labels = _glue_examples(recipe, path)
    enc = tokenizer(texts_a, texts_b, truncation="longest_first", max_length=recipe["max_seq_length"],
                    padding="max_length", return_tensors="pt")
    dtype = torch.float32 if recipe["labels"] is None else torch.long
    return enc, torch.tensor(labels, dtype=dtype)


def _hf_glue_setup(spec, recipe, tokenizer, info):
    import torch
    import transformers
    enc, labels = _glue_tensors(recipe, tokenizer, os.path.join(spec["data"]["data_dir"], "train.tsv"))
    num_labels = 1 if recipe["labels"] is None else len(recipe["labels"])
    model = _pretrained(transformers.AutoModelForSequenceClassification, spec, num_labels=num_labels)
    dataset = torch.utils.data.TensorDataset(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], labels)
    info["train_features"] = len(dataset)

    def collate(rows):
        ids, types, mask, y = (torch.stack(column) for column in zip(*rows))
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": y}
    return model, dataset, collate


def _hf_glue_predict(spec, recipe, tokenizer, model):
    import torch
    enc, labels = _glue_tensors(recipe, tokenizer, os.path.join(spec["data"]["data_dir"], "dev.tsv"))
    predictions = []
    with torch.no_grad():
        for i in range(0, len(labels), EVAL_BATCH_SIZE):
            logits = model(**{k: v[i:i + EVAL_BATCH_SIZE] for k, v in enc.items()}).logits
            predictions += (logits[:, 0] if recipe["labels"] is None else logits.argmax(-1)).tolist()
    with open(os.path.join(spec["run_dir"], "dev_predictions.json"), "w") as f:
        json.dump({"predictions": predictions, "labels": labels.tolist()}, f)


def read_conll_sentences(path):
    """[(words, tags)] of a CoNLL file: word first column, tag last; -DOCSTART- lines and blank lines split."""
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in list(f) + [""]:
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if words:
                    sentences.append((words, tags))
                words, tags = [], []
                continue
            words.append(fields[0])
            tags.append(fields[-1])
    return sentences


def _ner_encode(recipe, tokenizer, sentences, label_ids):
    """Per sentence: ids, word_ids and labels on the first sub-token of each word (-100 elsewhere)."""
    enc = tokenizer([words for words, _ in sentences], is_split_into_words=True, truncation=True,
                    max_length=recipe["max_seq_length"])
    rows = []
    for i, (_, tags) in enumerate(sentences):
        word_ids = enc.word_ids(i)
        labels, previous = [], None
        for w in word_ids:
            labels.append(label_ids[tags[w]] if w is not None and w != previous else -100)
            previous = w
        rows.append({"input_ids": enc["input_ids"][i], "token_type_ids": enc["token_type_ids"][i],
                     "attention_mask": enc["attention_mask"][i], "labels": labels, "word_ids": word_ids})
    return rows


def _ner_collate(rows):
    """Pads a batch to its longest row (dynamic padding, as ours trims each batch)."""
    import torch
    length = max(len(r["input_ids"]) for r in rows)
    out = {}
    for key, pad in (("input_ids", 0), ("token_type_ids", 0), ("attention_mask", 0), ("labels", -100)):
        out[key] = torch.tensor([r[key] + [pad] * (length - len(r[key])) for r in rows], dtype=torch.long)
    return out


def _hf_ner_setup(spec, recipe, tokenizer, info):
    import transformers
    train = read_conll_sentences(os.path.join(spec["data"]["data_dir"], "train.txt"))
    types = sorted({tag[2:] for _, tags in train for tag in tags if tag != "O"})
    labels = ["O"] + [prefix + t for t in types for prefix in ("B-", "I-")]
    info["labels"] = labels
    label_ids = {label: i for i, label in enumerate(labels)}
    model = _pretrained(transformers.AutoModelForTokenClassification, spec, num_labels=len(labels),
                        id2label=dict(enumerate(labels)), label2id=label_ids)
    rows = _ner_encode(recipe, tokenizer, train, label_ids)
    info["train_features"] = len(rows)
    info["train_words_truncated"] = sum(len(words) - len({w for w in r["word_ids"] if w is not None})
                                        for (words, _), r in zip(train, rows))
    return model, rows, _ner_collate


def _hf_ner_predict(spec, recipe, tokenizer, model, info):
    """Writes dev/test `word gold pred` files; words cut off by max_seq_length are predicted O (counted)."""
    import torch
    labels = info["labels"]
    label_ids = {label: i for i, label in enumerate(labels)}
    for split in ("dev", "test"):
        sentences = read_conll_sentences(os.path.join(spec["data"]["data_dir"], f"{split}.txt"))
        for words, tags in sentences:
            for tag in tags:
                label_ids.setdefault(tag, 0)  # a tag unseen in training is scored, never predicted
        rows = _ner_encode(recipe, tokenizer, sentences, label_ids)
        lines, truncated = [], 0
        with torch.no_grad():
            for i in range(0, len(rows), EVAL_BATCH_SIZE):
                batch = rows[i:i + EVAL_BATCH_SIZE]
                inputs = _ner_collate(batch)
                inputs.pop("labels")
                predicted = model(**inputs).logits.argmax(-1).tolist()
                for (words, tags), row, pred in zip(sentences[i:i + EVAL_BATCH_SIZE], batch, predicted):
                    word_pred, previous = {}, None
                    for position, w in enumerate(row["word_ids"]):
                        if w is not None and w != previous:
                            word_pred[w] = labels[pred[position]]
                        previous = w
                    truncated += len(words) - len(word_pred)
                    lines += [f"{word} {tag} {word_pred.get(j, 'O')}" for j, (word, tag) in enumerate(zip(words, tags))]
                    lines.append("")
        info[f"{split}_words_not_predicted"] = truncated
        with open(os.path.join(spec["run_dir"], f"{split}_predictions.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def read_squad(path):
    """[(qid, question, context, first answer text, its start char or None)] of a SQuAD 1.1 file."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    out = []
    for article in data:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answer = qa["answers"][0] if qa.get("answers") else None
                out.append((qa["id"], qa["question"].lstrip(), paragraph["context"],
                            answer["text"] if answer else None, answer["answer_start"] if answer else None))
    return out


def _squad_encode(recipe, tokenizer, examples):
    # HF convention: `stride` is the number of tokens consecutive windows overlap (ours: how far apart they start).
    return tokenizer([e[1] for e in examples], [e[2] for e in examples], truncation="only_second",
                     max_length=recipe["max_seq_length"], stride=recipe["doc_stride"],
                     return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length")


def squad_window_labels(examples, enc):
    """(starts, ends): each window's first-answer start and end token, or [CLS] (0, 0) where the answer is not
    inside the window's context."""
    starts, ends = [], []
    for i, offsets in enumerate(enc["offset_mapping"]):
        _, _, _, text, char_start = examples[enc["overflow_to_sample_mapping"][i]]
        char_end = char_start + len(text)
        sequence_ids = enc.sequence_ids(i)
        first = sequence_ids.index(1)  # the window's first and last context tokens
        last = len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
        if not (offsets[first][0] <= char_start and offsets[last][1] >= char_end):
            starts.append(0)
            ends.append(0)
            continue
        s = first
        while s <= last and offsets[s][0] <= char_start:
            s += 1
        e = last
        while e >= first and offsets[e][1] >= char_end:
            e -= 1
        starts.append(s - 1)
        ends.append(e + 1)
    return starts, ends


def _hf_squad_setup(spec, recipe, tokenizer, info):
    """Windows labelled with the first answer's start/end token, or [CLS] (0, 0) where the answer is not inside."""
    import torch
    import transformers
    examples = read_squad(spec["data"]["train_file"])
    enc = _squad_encode(recipe, tokenizer, examples)
    starts, ends = squad_window_labels(examples, enc)
    dataset = torch.utils.data.TensorDataset(
        torch.tensor(enc["input_ids"]), torch.tensor(enc["token_type_ids"]), torch.tensor(enc["attention_mask"]),
        torch.tensor(starts), torch.tensor(ends))
    info.update(train_examples=len(examples), train_features=len(dataset))
    model = _pretrained(transformers.AutoModelForQuestionAnswering, spec)

    def collate(rows):
        ids, types, mask, s, e = (torch.stack(column) for column in zip(*rows))
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "start_positions": s,
                "end_positions": e}
    return model, dataset, collate


def _hf_squad_predict(spec, recipe, tokenizer, model, info):
    """Best span over every window of a question (n-best start x end logits, context tokens only)."""
    examples = read_squad(spec["data"]["predict_file"])
    enc = _squad_encode(recipe, tokenizer, examples)
    info["eval_features"] = len(enc["input_ids"])
    predictions = squad_best_spans(recipe, examples, enc, *hf_squad_logits(model, enc))
    with open(os.path.join(spec["run_dir"], "predictions.json"), "w", encoding="utf-8") as f:
        json.dump(predictions, f)


def hf_squad_logits(model, enc):
    """(start logits, end logits) [windows, length] of an HF question-answering model over the windows of enc,
    in batches of EVAL_BATCH_SIZE."""
    import numpy as np
    import torch
    start_logits, end_logits = [], []
    with torch.no_grad():
        for i in range(0, len(enc["input_ids"]), EVAL_BATCH_SIZE):
            out = model(**{k: torch.tensor(enc[k][i:i + EVAL_BATCH_SIZE])
                           for k in ("input_ids", "token_type_ids", "attention_mask")})
            start_logits.append(out.start_logits.numpy())
            end_logits.append(out.end_logits.numpy())
    return np.concatenate(start_logits), np.concatenate(end_logits)


def squad_best_spans(recipe, examples, enc, start_logits, end_logits):
    """{question id: answer}: the best start + end logit over the n-best starts x ends of every window of a
    question, context tokens only, end >= start, at most max_answer_length tokens; the text from the offsets."""
    import numpy as np
    n_best, max_length = recipe["n_best_size"], recipe["max_answer_length"]
    best = {}  # example index -> (score, text)
    for i, offsets in enumerate(enc["offset_mapping"]):
        example = enc["overflow_to_sample_mapping"][i]
        context = examples[example][2]
        sequence_ids = enc.sequence_ids(i)
        for s in np.argsort(start_logits[i])[::-1][:n_best]:
            for e in np.argsort(end_logits[i])[::-1][:n_best]:
                if sequence_ids[s] != 1 or sequence_ids[e] != 1 or e < s or e - s + 1 > max_length:
                    continue
                score = float(start_logits[i][s] + end_logits[i][e])
                if example not in best or score > best[example][0]:
                    best[example] = (score, context[offsets[s][0]:offsets[e][1]])
    return {qid: best.get(j, (0.0, ""))[1] for j, (qid, *_) in enumerate(examples)}


def _glue_metrics(metric_names, predictions, labels):
    """{name: value} of GLUE's metrics by the project's evaluator (glue_evaluation.py in --runner_dir), the one
    run_classifier.py writes eval_results.txt with."""
    path = os.path.join(process.RUNNER_DIR, "glue_evaluation.py")
    spec = importlib.util.spec_from_file_location("glue_evaluation", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.compute_metrics(metric_names, predictions, labels)
    return {name: float(results["eval_" + name]) for name in metric_names}


def hf_scores(recipe, data, run_dir):
    """The child's predictions scored by the project's evaluators, as ours' runners score theirs."""
    if recipe["kind"] == "glue":
        with open(os.path.join(run_dir, "dev_predictions.json")) as f:
            out = json.load(f)
        predictions = out["predictions"]
        if recipe["labels"] is not None:
            predictions = [int(p) for p in predictions]
        metrics = _glue_metrics(recipe["metrics"], predictions, out["labels"])
        return {name: 100.0 * value for name, value in metrics.items()}
    if recipe["kind"] == "ner":
        return {"f1": conlleval_f1(os.path.join(run_dir, "test_predictions.txt")),
                "dev_f1": conlleval_f1(os.path.join(run_dir, "dev_predictions.txt"))}
    eval_file = os.path.join(run_dir, "eval_results.json")
    cmd = [sys.executable, "squad_evaluation.py", data["predict_file"], os.path.join(run_dir, "predictions.json"),
           "--out-file", eval_file]
    subprocess.run(cmd, cwd=process.RUNNER_DIR, check=True, capture_output=True, text=True)
    with open(eval_file) as f:
        results = json.load(f)
    return {"exact_match": float(results["exact_match"]), "f1": float(results["f1"])}


def conlleval_f1(path):
    """Overall FB1 printed by the project's conlleval.py CLI (the perl script's report)."""
    proc = subprocess.run([sys.executable, "conlleval.py", path], cwd=process.RUNNER_DIR, capture_output=True,
                          text=True, check=True)
    m = re.search(r"^accuracy:.*FB1:\s+([\d.]+)", proc.stdout, re.M)
    if not m:
        raise RuntimeError(f"conlleval.py {path}: no overall FB1 in its report:\n{proc.stdout[:500]}")
    return float(m.group(1))


def run_hf(impl, task, recipe, data, hf_model_dir, run_dir, seed, epochs, timeout):
    """One hf or hf_matched row: hf_child in its own process (bench_finetuning.py --hf_child), then its
    predictions scored here; the row's result."""
    spec = dict(impl=impl, task=task, recipe=recipe, data=data, model_dir=hf_model_dir, run_dir=run_dir, seed=seed,
                epochs=epochs)
    spec_path = os.path.join(run_dir, "hf_spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f, indent=1)
    cmd = [sys.executable, CHILD_SCRIPT, f"--hf_child={spec_path}"]
    log = os.path.join(run_dir, "run.log")
    code, wall, rss, load = process.run_process(cmd, log, timeout, cwd=ROOT)
    if code != 0:
        raise RuntimeError(f"{'timed out' if code is None else f'exit {code}'}; log {log}:\n{process.log_tail(log)}")
    with open(os.path.join(run_dir, "hf_result.json")) as f:
        result = json.load(f)
    result.pop("labels", None)
    result.update(scores=hf_scores(recipe, data, run_dir), wall_s=wall, peak_rss_mb=rss, load_mean=load,
                  command=shlex.join(cmd).replace(ROOT + "/", "").replace(process.RUNNER_DIR + "/", ""))
    return result
