"""main_job.py: the built-in corpus and classification data, and a reduced end-to-end run."""
import os

import pytest

import main_job
from tests.pretraining_records import read_records

@pytest.fixture(scope="module")
def documents():
    return main_job.stdlib_documents()


def test_stdlib_corpus_is_real_prose(documents):
    sentences = [s for doc in documents.values() for s in doc]
    assert len(documents) > 200
    assert len(sentences) > 5000
    assert sum(len(s.split()) for s in sentences) > 80000
    # Known standard-library docstring sentences are found, in their module.
    assert documents["posixpath"][0] == "Common operations on Posix pathnames."
    assert any(s.startswith("JSON (JavaScript Object Notation)") for s in documents["json"])
    assert any("(e.g. " in s for doc in documents.values() for s in doc)
    for s in sentences:
        assert s[0].isupper() and s[-1] in ".!?:", s
        assert not s.startswith(">>>") and "\n" not in s and "\t" not in s
    assert not any(m.split(".")[0] in ("test", "idlelib.idle_test") or ".tests" in m for m in documents)


def test_split_sentences_and_filters():
    text = ("Return the value, e.g. a number (i.e. an int). The second sentence ends here! Is it a question? "
            "See Mr. Smith for details. x = f(y) + 2;")
    assert main_job.split_sentences(text) == [  # the code after a full stop is a piece of its own (not prose)
        "Return the value, e.g. a number (i.e. an int).", "The second sentence ends here!", "Is it a question?",
        "See Mr. Smith for details.", "x = f(y) + 2;"]
    assert not main_job.is_prose_sentence("x = f(y) + 2;")
    doc = ("Summary line of the function.\n\nA longer paragraph that explains\nwhat the function does.\n\n"
           "    indented_code(block)\n\n>>> doctest_line()\n42\n\nArgs:\n    x: the input value.")
    assert main_job.docstring_sentences(doc) == [
        "Summary line of the function.", "A longer paragraph that explains what the function does."]
    assert not main_job.is_prose_sentence("self.assertEqual(a, b) == {'x': 1}.")
    assert not main_job.is_prose_sentence("Too short.")
    assert not main_job.is_prose_sentence("Encoding basic Python object hierarchies::")


FORTY = main_job.SplitSizes(train_per_label=40)


def test_classification_splits(documents, tmp_path):
    splits = main_job.build_classification_splits(documents, sizes=FORTY)
    labels = set(main_job.DEFAULT_LABELS)
    seen = {}
    for name, rows in splits.items():
        assert rows
        assert {label for _, label in rows} == labels
        for sentence, label in rows:
            assert seen.setdefault(sentence, (name, label)) == (name, label), sentence  # no leaks or clashes
    counts = {name: {label: sum(1 for _, l in rows if l == label) for label in labels} for name, rows in splits.items()}
    assert set(counts["train"].values()) == {40}
    assert len(set(counts["dev"].values())) == 1 and len(splits["dev"]) >= 500
    assert len(set(counts["test"].values())) == 1 and len(splits["test"]) >= 200
    # Same seed, same data; more training sentences leave dev and test as they are.
    assert main_job.build_classification_splits(documents, sizes=FORTY) == splits
    every = main_job.build_classification_splits(documents)
    assert every["dev"] == splits["dev"] and every["test"] == splits["test"]
    assert set(splits["train"]) < set(every["train"]) and len(every["train"]) >= 5 * 150
    assert main_job.build_classification_splits(documents, sizes=FORTY, seed=1)["dev"] != splits["dev"]
    path = tmp_path / "train.tsv"
    main_job.write_tsv(splits["train"], str(path))
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "label\tsentence" and len(lines) == len(splits["train"]) + 1
    assert all(len(line.split("\t")) == 2 for line in lines)
    with pytest.raises(ValueError, match="--labels: packages \\['no_such_package'\\]"):
        main_job.build_classification_splits(documents, labels=("json", "no_such_package"))


def test_default_requests_are_not_training_text(documents):
    """The demo requests were written for it: none is a sentence of the standard library, and each names a
    package of the built-in task."""
    sentences = {s for doc in documents.values() for s in doc}
    assert set(main_job.DEFAULT_REQUESTS.values()) == set(main_job.DEFAULT_LABELS)
    assert not sentences & set(main_job.DEFAULT_REQUESTS)


def test_comparison_table_says_what_the_runs_show():
    rows = [main_job.Row("this run's pre-training (2 x 128)", "ckpt", None, None, True, 5e-4, 20, [1, 2, 3]),
            main_job.Row("random initialisation (same model)", None, None, None, True, 5e-4, 20, [1, 2, 3]),
            main_job.Row("MiniLM-L6, pre-trained for real (6 x 384)", "ref", None, None, True, 1e-4, 5, [1])]
    apart = {rows[0].name: [0.80, 0.82, 0.81], rows[1].name: [0.55, 0.60, 0.52], rows[2].name: [0.9]}
    lines = main_job.comparison_table(rows, [1, 2, 3], apart, 550, 5, 0.2)
    assert "dev accuracy (550 sentences, 5 classes; the most frequent class alone: 0.200), fine-tuning seeds 1, 2, 3:" \
        in lines
    assert any(line.split() == ["this", "run's", "pre-training", "(2", "x", "128)", "0.810", "±", "0.010", "0.800",
                                "0.820", "0.810"] for line in lines)
    assert any(line.split()[-6:] == ["0.900", "±", "-", "0.900", "-", "-"] for line in lines)  # one run
    assert lines[-1] == ("  difference, pre-trained minus random initialisation: +0.253 (clearly ahead: every "
                         "pre-trained run beats every random one, by 6.3 x the larger sd)")
    close = {**apart, rows[1].name: [0.70, 0.79, 0.61]}
    assert main_job.comparison_table(rows, [1, 2, 3], close, 550, 5, 0.2)[-1].endswith(
        "(NOT clearly ahead: every pre-trained run beats every random one, by less than 2 x the larger sd)")
    overlapping = {**apart, rows[0].name: [0.60, 0.82, 0.81], rows[1].name: [0.55, 0.65, 0.52]}
    assert main_job.comparison_table(rows, [1, 2, 3], overlapping, 550, 5, 0.2)[-1].endswith(
        "(NOT clearly ahead: the two rows' runs overlap)")


def test_corpus_file_round_trip(documents, tmp_path):
    path = str(tmp_path / "corpus.txt")
    first = next(iter(documents.values()))
    n_docs, n_sent = main_job.write_corpus(documents, path, exclude=[first[0]])
    read = main_job.read_corpus(path)
    assert len(read) == n_docs and sum(len(d) for d in read) == n_sent
    assert first[0] not in read[0]
    with pytest.raises(FileNotFoundError, match="--corpus_file"):
        main_job.read_corpus(str(tmp_path / "missing.txt"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no text"):
        main_job.read_corpus(str(empty))


def _run_main_job(args, cwd, timeout=900):
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, os.path.join(root, "main_job.py")] + args, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    for noise in ("failed call to cuInit", "before absl::InitializeLog", "Compiled cluster using XLA"):
        assert noise not in proc.stdout + proc.stderr  # TF_CPP_MIN_LOG_LEVEL=2, as scripts/setup.sh sets it
    return proc.stdout


@pytest.mark.slow
def test_reduced_main_job_end_to_end(tmp_path):
    """The main job's code path with fewer steps and seeds (the MiniLM-L6 row included), then again on the
    user's own corpus, vocab and checkpoint."""
    import json
    out = tmp_path / "job"
    stdout = _run_main_job([f"--output_dir={out}", "--vocab_size=3000", "--pretrain_steps=30", "--eval_every=15",
                            "--pretrain_warmup_steps=5", "--max_eval_steps=3", "--dupe_factor=1",
                            "--train_per_label=20", "--classifier_epochs=1", "--finetune_seeds=2",
                            "--reference_epochs=0.5",
                            "--request=Return the number of log records handled by this logger.",
                            f"--request={next(iter(main_job.DEFAULT_REQUESTS))}"], str(tmp_path))
    for stage in range(1, 7):
        assert f"stage {stage}/6" in stdout
    # Artifacts.
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"} <= set(vocab)
    records = read_records(str(out / "pretraining_data" / "train.tfrecord"))
    # Masked positions over tokens, [CLS] and [SEP] counted as the masked fraction counts them.
    masked, tokens = records["masked_lm_weights"].sum(), records["input_mask"].sum()
    assert 0.57 < masked / tokens < 0.63  # --masked_lm_prob=0.6 by default (the original's 0.15 is too little here)
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        assert (out / "classifier_data" / name).exists()
    assert len((out / "classifier_data" / "train.tsv").read_text(encoding="utf-8").splitlines()) == 1 + 5 * 20
    evals = json.loads((out / "pretrain" / "mlm_accuracy_by_step.json").read_text())
    assert [step for step, _ in evals] == [0, 15, 30]
    assert evals[-1][1]["masked_lm_loss"] < evals[0][1]["masked_lm_loss"]
    assert evals[-1][1]["masked_lm_accuracy"] > evals[0][1]["masked_lm_accuracy"]
    # The table: each row's runs, from its own starting point, and the difference.
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["seeds"] == [12345, 12346]
    rows = comparison["rows"]
    assert [row["name"] for row in rows] == ["this run's pre-training (2 x 128)", "random initialisation (same model)",
                                             "MiniLM-L6, pre-trained for real (6 x 384)"]
    assert rows[0]["init_checkpoint"] == str(out / "pretrain" / "model.ckpt-30") and rows[1]["init_checkpoint"] is None
    assert rows[2]["init_checkpoint"] == str(out / "reference_checkpoint" / "bert_model.ckpt")
    assert [row["seeds"] for row in rows] == [[12345, 12346], [12345, 12346], [12345]]  # --reference_seeds=1
    assert [row["epochs"] for row in rows] == [1, 1, 0.5] and rows[2]["learning_rate"] == 1e-4
    for row in rows:
        assert len(row["dev_accuracy"]) == len(row["seeds"]) and all(0 <= a <= 1 for a in row["dev_accuracy"])
        for seed in row["seeds"]:
            run = out / "classifier" / f"{main_job._slug(row['name'])}_seed{seed}"
            assert "eval_accuracy = " in (run / "eval_results.txt").read_text()
    lines = stdout.splitlines()
    header = lines.index(f"dev accuracy ({comparison['dev_examples']} sentences, 5 classes; the most frequent class "
                         f"alone: 0.200), fine-tuning seeds 12345, 12346:")
    for row, line in zip(rows, lines[header + 2:header + 5]):
        mean = sum(row["dev_accuracy"]) / len(row["dev_accuracy"])
        assert line.startswith(f"  {row['name']}") and f"{mean:.3f} ± " in line
    assert lines[header + 4].split()[-2:] == [f"{rows[2]['dev_accuracy'][0]:.3f}", "-"]  # one run, one seed
    assert lines[header + 5].startswith("  difference, pre-trained minus random initialisation: "
                                        f"{(sum(rows[0]['dev_accuracy']) - sum(rows[1]['dev_accuracy'])) / 2:+.3f} (")
    assert "about 0 s left in this stage" in stdout and "run 5/5: from MiniLM-L6" in stdout
    assert (out / "classifier" / f"{main_job._slug(rows[0]['name'])}_seed12345" / "test_results.tsv").exists()
    assert (out / "export" / "saved_model.pb").exists()
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(out / "pretrain"))
    assert "the exported model (run 1): test set accuracy = " in stdout
    # The answers, in a fresh process: a default request beside the package it documents.
    answer = [line for line in lines if "<- Return the number of log records" in line]
    assert len(answer) == 1 and answer[0].split()[0] in main_job.DEFAULT_LABELS and "expected" not in answer[0]
    text, package = next(iter(main_job.DEFAULT_REQUESTS.items()))
    answer = [line for line in lines if line.endswith(f"<- {text}")]
    assert len(answer) == 1 and answer[0].split()[2:4] in (["expected", package], )
    assert answer[0].split()[4] == ("right" if answer[0].split()[0] == package else "WRONG")
    assert "of 1 requests answered with the package they document" in stdout
    assert f"tensorboard --logdir {out}" in stdout
    assert "main_job.log" in stdout and (out / "main_job.log").stat().st_size > 0

    # The same command on the user's own corpus, vocab, checkpoint and task data (no pre-training steps).
    own = tmp_path / "own"
    checkpoint = out / "pretrain" / "model.ckpt-30"
    stdout = _run_main_job([f"--output_dir={own}", f"--corpus_file={out / 'corpus_eval.txt'}",
                            f"--vocab_file={out / 'vocab.txt'}", f"--init_checkpoint={checkpoint}",
                            f"--bert_config_file={out / 'pretrain' / 'bert_config.json'}",
                            f"--task_data_dir={out / 'classifier_data'}", "--pretrain_steps=0",
                            "--classifier_epochs=1", "--dupe_factor=1", "--finetune_seeds=1",
                            "--random_init_row=false", "--reference_hf_dir="], str(tmp_path))
    assert f"using --vocab_file {out / 'vocab.txt'}" in stdout
    assert f"fine-tuning {checkpoint}" in stdout
    assert "run 1/1: from --init_checkpoint (2 x 128), seed 12345" in stdout and "difference" not in stdout
    assert (own / "export" / "saved_model.pb").exists()
    assert not (own / "vocab.txt").exists() and not (own / "classifier_data").exists()
    assert not (own / "reference_checkpoint").exists()


def test_console_filter_keeps_progress_lines_only():
    import logging as pylogging

    def record(module, level, message):
        return pylogging.LogRecord("absl", level, f"/x/{module}.py", 1, message, None, None)

    keep = [record("training", pylogging.INFO, "step 50/500: loss = 7.5"),
            record("create_pretraining_data", pylogging.INFO, "Wrote 16658 total instances"),
            record("checkpoints", pylogging.WARNING, "checkpoint lacks variable x")]
    drop = [record("checkpoints", pylogging.INFO, "  name = bert/pooler/dense/kernel, *INIT_FROM_CKPT*"),
            record("main_job", pylogging.INFO, "[main_job 00:01] stage 1/6"),  # printed by Progress itself
            record("api", pylogging.WARNING, "AutoGraph could not transform <function f> and will run it as-is.")]
    assert all(main_job._console_filter(r) for r in keep)
    assert not any(main_job._console_filter(r) for r in drop)


def test_bad_input_flags_fail_before_anything_is_written(tmp_path):
    """Each input flag naming something missing, or out of range, ends in one line naming the flag; no output
    folder is made."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (data / name).write_text("label\tsentence\na\tone two three\n", encoding="utf-8")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    config = tmp_path / "bert_config.json"
    config.write_text("{}", encoding="utf-8")
    cases = [
        ([f"--corpus_file={tmp_path / 'no_corpus.txt'}"], "--corpus_file=", "no such file"),
        ([f"--vocab_file={tmp_path}"], "--vocab_file=", "is a folder, expected a file"),
        ([f"--task_data_dir={tmp_path / 'no_data'}"], "--task_data_dir=", "no such folder"),
        ([f"--task_data_dir={data}"], "test.tsv", "no such file"),
        ([f"--init_checkpoint={tmp_path / 'ckpt'}", f"--bert_config_file={config}", f"--vocab_file={vocab}"],
         "--init_checkpoint=", "checkpoint not found"),
        (["--masked_lm_prob=1.5"], "--masked_lm_prob=1.5", "must be in (0, 1]"),
        ([f"--bert_config_file={config}"], "--bert_config_file", "only used with --init_checkpoint"),
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    for args, names, what in cases:
        out = tmp_path / "out" / "job"
        proc = subprocess.run([sys.executable, os.path.join(root, "main_job.py"), f"--output_dir={out}"] + args,
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        assert len(lines) == 1 and names in lines[0] and what in lines[0], (args, proc.stderr[-2000:])
        assert not (tmp_path / "out").exists(), args
