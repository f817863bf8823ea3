"""serving.py: what an exported SavedModel answers and refuses, made by the runners' command lines.

- What serving_text reads of a request (serving.bounded_text, litert_classifier.bounded_text): a cut never changes
  the first tokens, a text whose first tokens it cannot keep and an oversized request are refused, and a 50 MB
  request is answered as its first tokens alone in bounded memory, by the SavedModel and the LiteRT model.
- Served models that no request knocks over, on the exports of every task: the model over at most
  --export_rows_per_step rows of a call at a time, in bounded memory; every malformed request refused in one
  InvalidArgumentError naming its input; generated requests in a child process (tests/serving_probe.py). That a
  call in steps answers as before: the export tests of each runner send more rows (SQuAD: windows) than a step
  holds and compare with the runner's predictions (test_run_classifier.py, test_run_ner.py, test_run_squad.py).
- Exports in half precision (--export_dtype) and compiled with XLA at padded shapes (--use_xla): the same MRPC dev
  labels as float32, and a few compiles, no retrace, across 100 requests of varying batch sizes and lengths.
"""
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import cli
import encoder
import fast_tokenization
import litert_classifier
import model_options
import packing
import run_classifier as rc
import serving
import tokenization
from model_options import ModelOptions
from tests import tiny
from tests.processes import ROOT, assert_ran, assert_user_error, run_isolated, run_script, script_env
from tests.shared_data import glue, mrpc_pairs, shared_path, vocab


# ---------------------------------------------------------------------------------------------------------
# What serving_text reads of a request.


WORDS = ("the quick brown fox jumps over lazy dog return value file path module loader test case event loop "
         "σας λόγος ΣΟΦΟΣ naïve café résumé").split()
MAX_SEQ_LENGTH = 16


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    """A vocabulary of some words, every letter (alone and as a suffix), punctuation and a few CJK characters."""
    letters = sorted(set("".join(WORDS).lower()) | set("abcdefghijklmnopqrstuvwxyz"))
    tokens = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(w.lower() for w in WORDS)) + letters
              + ["##" + c for c in letters] + list(".,;:!?'\"()-/") + list("中文字語"))
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(dict.fromkeys(tokens)) + "\n", encoding="utf-8")
    return str(path)


def _random_text(rng, length):
    """Text of words, punctuation, CJK, accents, Greek sigma, control characters and runs of whitespace."""
    parts = []
    while sum(map(len, parts)) < length:
        kind = rng.random()
        if kind < 0.5:
            parts.append(rng.choice(WORDS) + rng.choice(["", "", "'s", "Σ", "\u0301"]))
        elif kind < 0.65:
            parts.append(rng.choice(".,;:!?'\"()-/…«»、。"))
        elif kind < 0.75:
            parts.append("".join(rng.choice("中文字語") for _ in range(rng.randint(1, 4))))
        elif kind < 0.8:
            parts.append(rng.choice(["\x00", "\u200b", "\x7f", "\ufffd"]))
        else:
            parts.append(rng.choice([" ", " ", "  ", "\t", "\n", "\u3000", "\xa0"]))
    return "".join(parts)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_a_cut_text_keeps_the_first_tokens_of_the_original_tokenizer(vocab_file, do_lower_case):
    """Texts over the limit, cut at every kind of character: the original tokenizer's first max_tokens tokens
    of the cut text are those of the whole text."""
    max_tokens = 4
    limit = serving.text_cut_chars(max_tokens)
    tokenizer = fast_tokenization.FastBertTokenizer(vocab_file, do_lower_case)
    original = tokenization.FullTokenizer(vocab_file, do_lower_case)
    rng = random.Random(5)
    texts = [_random_text(rng, rng.randint(limit - 20, limit + 300)) for _ in range(300)]
    texts += ["ab " * 1000, "中" * 2000, "x.y," * 300, "ΑΣ.Β " * 300, "ΑΣ'Β" + "Σ," * 500]
    cut = [t.decode("utf-8") for t in serving.bounded_text(tf.constant(texts), "text_a", tokenizer,
                                                           max_tokens).numpy()]
    cuts = 0
    for text, kept in zip(texts, cut):
        assert text.startswith(kept)
        if len(text) <= limit:
            assert kept == text
            continue
        cuts += 1
        assert limit // 2 < len(kept) <= limit
        assert original.tokenize(kept)[:max_tokens] == original.tokenize(text)[:max_tokens], (text, kept)
    assert cuts > 150


def test_texts_whose_first_tokens_a_cut_cannot_keep_are_refused(vocab_file):
    tokenizer = fast_tokenization.FastBertTokenizer(vocab_file, True)
    limit = serving.text_cut_chars(MAX_SEQ_LENGTH)
    for text in (" " * limit + "the fox", "a" * (limit + 1), "\x00" * limit + "the fox jumps", "e" + "\u0301" * limit):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=f"serving_text: a text of text_a over {limit} characters must hold its first "
                                 f"{MAX_SEQ_LENGTH} tokens within them"):
            serving.bounded_text(tf.constant(["the fox", text]), "text_a", tokenizer, MAX_SEQ_LENGTH)
    # A text at the limit is read whole, whatever it holds.
    whole = " " * (limit - 3) + "fox"
    assert serving.bounded_text(tf.constant([whole]), "text_a", tokenizer, MAX_SEQ_LENGTH).numpy()[0] == \
        whole.encode()


def test_a_request_over_the_limit_is_refused(vocab_file):
    tokenizer = fast_tokenization.FastBertTokenizer(vocab_file, True)
    sentence = "the quick brown fox jumps over the lazy dog. "
    # Cut texts count with their cut length (4.5 MB of text_a cut to 3.2 MB fits); uncut texts count whole.
    many = tf.constant([sentence * 100] * 1000)
    assert serving.bounded_text(many, "text_a", tokenizer, MAX_SEQ_LENGTH).shape == [1000]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"serving_text: context holds more than {serving.MAX_REQUEST_BYTES} bytes of text in "
                             "all \\(the request's limit\\): send fewer or shorter texts"):
        serving.bounded_text(many, "context")
    one = sentence * (serving.MAX_REQUEST_BYTES // len(sentence))
    assert serving.bounded_text(tf.constant([one]), "context").numpy()[0] == one.encode()


def _tiny_config(vocab_file):
    with open(vocab_file, encoding="utf-8") as f:
        size = sum(1 for _ in f)
    return encoder.BertConfig(vocab_size=size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=64, initializer_range=0.5)


def _options(vocab_file):
    return model_options.ModelOptions(vocab_file=vocab_file, do_lower_case=True, max_seq_length=MAX_SEQ_LENGTH)


def test_squad_cuts_a_long_question_and_refuses_a_context_over_the_limit(vocab_file):
    tf.keras.utils.set_random_seed(2)
    module = serving.SquadServing(encoder.SquadModel(_tiny_config(vocab_file)), _options(vocab_file),
                                  serving.SquadAnswering(doc_stride=4, max_query_length=6))
    context = "the quick brown fox jumps over the lazy dog . the loader returns the module path ."
    question = "what does the loader return"
    answer = module.serve_text(tf.constant([question]), tf.constant([context]))
    long_answer = module.serve_text(tf.constant([question + " ?" * 5_000_000]), tf.constant([context]))
    for key in ("answer", "start", "end", "score"):
        assert long_answer[key].numpy().tolist() == answer[key].numpy().tolist()
    with pytest.raises(tf.errors.InvalidArgumentError, match="serving_text: context holds more than"):
        module.serve_text(tf.constant([question]), tf.constant([context * 60_000]))


def test_ner_refuses_a_sentence_over_the_limit(vocab_file):
    tf.keras.utils.set_random_seed(2)
    model = encoder.ClassifierModel(_tiny_config(vocab_file), 3, per_token=True)
    module = serving.NerServing(model, _options(vocab_file), doc_stride=4, labels=["O", "B-X", "I-X"])
    sentence = "the quick brown fox jumps over the lazy dog"
    assert module.serve_text(tf.constant([sentence]))["num_words"].numpy().tolist() == [9]
    with pytest.raises(tf.errors.InvalidArgumentError, match="serving_text: sentence holds more than"):
        module.serve_text(tf.constant([(sentence + " ") * 100_000]))


ANSWER_BIG_REQUEST = r"""
import json, re, sys
import numpy as np
import tensorflow as tf, tensorflow_text

def memory_mb(name):
    with open("/proc/self/status") as f:
        return int(re.search(name + r":\s+(\d+) kB", f.read()).group(1)) / 1024

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Linux: the peak (VmHWM) restarts from the current resident size

kind, path, request_file, first = sys.argv[1:]
if kind == "saved_model":
    serve = tf.saved_model.load(path).signatures["serving_text"]

    def ask(texts, measure=None):
        texts = tf.constant(texts)
        (measure or (lambda: None))()
        out = serve(text_a=texts)
        return out["label"].numpy()[0].decode(), out["probabilities"].numpy().tolist()
else:
    from ai_edge_litert.interpreter import InterpreterWithCustomOps
    interpreter = InterpreterWithCustomOps(custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS,
                                           model_path=path)

    def ask(texts, measure=None):
        text_a = interpreter.get_input_details()[0]["index"]
        interpreter.resize_tensor_input(text_a, [len(texts)])
        interpreter.allocate_tensors()
        interpreter.set_tensor(text_a, np.array(texts, dtype=object))  # the interpreter's copy of the request
        (measure or (lambda: None))()
        interpreter.invoke()
        out = {d["dtype"] == np.float32: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()}
        return out[False][0].decode(), out[True].tolist()  # the label, the probabilities
alone = ask([first.encode()])
ask([b"warm up " * 10000])
with open(request_file, "rb") as f:
    request = [f.read()]
before = []
answer = ask(request, lambda: (reset_peak(), before.append(memory_mb("VmRSS"))))
print(json.dumps({"label": [answer[0], alone[0]], "probabilities": [answer[1], alone[1]],
                  "peak_increase_mb": memory_mb("VmHWM") - before[0]}))
"""


@pytest.mark.slow
def test_a_50_mb_request_is_answered_as_its_first_tokens_alone_in_bounded_memory(vocab_file, tmp_path):
    """The exported classifier's serving_text and its LiteRT model, loaded in a fresh process: a 50 MB text_a
    gets the label and probabilities of its first max_seq_length tokens alone, and the process's peak memory
    grows by less than the request itself (uncut, tokenizing it took 1.2 GB)."""
    config = _tiny_config(vocab_file)
    tf.keras.utils.set_random_seed(3)
    model = encoder.ClassifierModel(config, 3)
    model.head.output_weights.assign(model.head.output_weights * 20.0)
    tiny.save(model, tmp_path / "ckpt")
    export_dir = str(tmp_path / "export")
    serving.export_saved_model(export_dir, lambda: encoder.ClassifierModel(config, 3),
                               str(tmp_path / "ckpt" / "model.ckpt-0"),
                               lambda m: serving.ClassifierServing(m, _options(vocab_file), False, False,
                                                                   ["a", "b", "c"]),
                               settings=serving.ExportSettings(rows_per_step=None))
    tflite = litert_classifier.export(str(tmp_path / "model.tflite"), export_dir, _options(vocab_file), False)
    first = "return the file path of the module loader, naïve café σας"
    request = tmp_path / "request.txt"
    request.write_bytes((first + " " + "the quick brown fox jumps over the lazy dog. " * 1_200_000).encode()[:50_000_000])
    for kind, path in (("saved_model", export_dir), ("litert", tflite)):
        result = assert_ran(subprocess.run(
            [sys.executable, "-c", ANSWER_BIG_REQUEST, kind, path, str(request), first], cwd=tmp_path,
            capture_output=True, text=True, timeout=600, env=script_env()))
        answer = json.loads(result.stdout.strip().splitlines()[-1])
        assert answer["label"][0] == answer["label"][1], (kind, answer)
        np.testing.assert_allclose(*answer["probabilities"], atol=1e-5)
        assert answer["peak_increase_mb"] < 40, (kind, answer)


def _graph_ops(graph, seen=None):
    """The ops of a graph and of every function it calls, recursively."""
    seen = set() if seen is None else seen
    ops = list(graph.get_operations())
    for function in graph._functions.values():  # pylint: disable=protected-access
        if function.name not in seen:
            seen.add(function.name)
            ops += _graph_ops(function.graph, seen)
    return ops


def _graph_op_names(graph):
    return [op.name for op in _graph_ops(graph)]


def test_the_steps_branch_stays_a_function_in_a_loaded_export(mrpc_export):
    """serving._cond_unlowered sets TensorFlow's private attribute _lower_using_switch_merge to False on the
    If that runs a call's rows past the first step (lowered to Switch/Merge, the branch not taken would be walked
    on every call). Fails loudly when it stops working: TensorFlow must still mark a plain tf.cond for lowering
    under that name (the name its lowering pass reads), and the If in the exported graph, saved and loaded, must
    still carry it False."""
    plain = tf.function(lambda x: tf.cond(x > 0, lambda: x, lambda: -x), autograph=False)
    ifs = [op for op in plain.get_concrete_function(tf.TensorSpec([], tf.float32)).graph.get_operations()
           if op.type in ("If", "StatelessIf")]
    assert [op.get_attr("_lower_using_switch_merge") for op in ifs] == [True]
    loaded = tf.saved_model.load(mrpc_export["export_dir"])
    for signature in (serving.SERVING_DEFAULT, serving.SERVING_TEXT):
        settings = [op.get_attr("_lower_using_switch_merge") for op in _graph_ops(loaded.signatures[signature].graph)
                    if op.type in ("If", "StatelessIf") and "_lower_using_switch_merge" in op.node_def.attr]
        assert False in settings, (signature, settings)


def test_serving_text_builds_no_dense_row_ids():
    """Every task's serving_text graph, with every function it calls (the steps, the tokenizer's paths), holds
    none of TensorFlow's ragged row ids or per-row repeats (name scopes RaggedSplitsToSegmentIds, RaggedValueRowIds,
    Repeat), which tile a dense [rows x longest row]: a request whose rows pair one 100,000-character word with
    42,000 words would need 33.6 GB. linear_ragged.py's operations stand in for them."""
    options = ModelOptions(vocab_file=vocab(), max_seq_length=64)
    config = tiny.config(max_position_embeddings=512, type_vocab_size=2)
    modules = {"classifier": serving.ClassifierServing(encoder.ClassifierModel(config, 2), options, False, True),
               "ner": serving.NerServing(encoder.ClassifierModel(config, 3, per_token=True), options, 16,
                                         ["O", "B", "I"]),
               "squad": serving.SquadServing(encoder.SquadModel(config), options,
                                             serving.SquadAnswering(doc_stride=16, max_query_length=12))}
    for name, module in modules.items():
        module.run_in_steps(3)
        names = _graph_op_names(module.signatures()[serving.SERVING_TEXT].graph)
        assert len(names) > 500, name  # the whole graph was walked
        dense = [op for op in names if any(part.startswith(("RaggedSplitsToSegmentIds", "RaggedValueRowIds",
                                                              "Repeat")) for part in op.split("/"))]
        assert not dense, (name, dense[:5])


# ---------------------------------------------------------------------------------------------------------
# The runners' exports, against generated requests in a child process.


PROBE = os.path.join(ROOT, "tests", "serving_probe.py")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A tiny random checkpoint exported by run_classifier.py (MRPC, float32), run_ner.py (bfloat16) and
    run_squad.py (XLA), each with --export_rows_per_step=3 and --do_train=false."""
    work = tmp_path_factory.mktemp("exports")
    values = dict(max_position_embeddings=512, type_vocab_size=2)
    config_file = tiny.config_file(work / "bert_config.json", **values)
    tf.keras.utils.set_random_seed(1)
    bert = encoder.BertEncoder(tiny.config(**values))
    bert(tf.ones([1, 4], tf.int32), tf.ones([1, 4], tf.int32), tf.zeros([1, 4], tf.int32))
    checkpoint = tiny.save(bert, work / "ckpt")
    common = [f"--vocab_file={vocab()}", f"--bert_config_file={config_file}", f"--init_checkpoint={checkpoint}",
              "--do_train=false", "--export_rows_per_step=3"]
    jobs = {"classifier": ("run_classifier.py", "--task_name=MRPC", f"--data_dir={glue('MRPC')}",
                           "--max_seq_length=64"),
            "ner": ("run_ner.py", f"--data_dir={shared_path('data', 'conll2003')}", "--max_seq_length=32",
                    "--export_dtype=bfloat16"),
            "squad": ("run_squad.py", "--max_seq_length=64", "--doc_stride=16", "--max_query_length=12",
                      "--version_2_with_negative", "--use_xla=true")}
    out = {}
    for name, (script, *flags) in jobs.items():
        export_dir = work / name
        proc = assert_ran(run_script(script, *common, *flags, f"--output_dir={work / (name + '_run')}",
                                     f"--export_dir={export_dir}"))
        assert "the model over at most 3 rows at a time" in proc.stderr
        out[name] = str(export_dir)
    return out


@pytest.mark.slow
def test_generated_requests_are_answered_or_refused_by_every_export(exports):
    """tests/serving_probe.py in a fresh process (the project not importable there), 70 requests to each export:
    valid, odd (empty, control characters, invalid UTF-8, long texts, no rows) and malformed requests (unequal
    rows, rows of no or too many positions, ids, masks and segments out of range, unequal shapes) against both
    signatures of each task's export, then 6 serving_text requests whose rows differ in shape (a word of up to
    100,000 characters beside up to 45,000 words, one long text beside thousands of empty rows, rows of lengths
    far apart), then the answered text requests again from 8 threads at once: each answered with its own rows
    and finite, normalised probabilities (under threads, as alone), or refused by an InvalidArgumentError naming
    an input, the process's peak memory growing by at most the probe's linear bound per call; nothing else."""
    names = sorted(exports)
    proc = subprocess.run([sys.executable, "-I", PROBE, *(exports[name] for name in names), "--seed=0",
                           "--count=70", "--max_rows=9", "--cross_rows=6", "--threads=8"], capture_output=True,
                          text=True, timeout=900, env=script_env())
    assert proc.returncode == 0, proc.stderr[-3000:]  # no crash, no hang
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for export, name in enumerate(names):
        records = [r for r in lines if r["export"] == export and "summary" not in r]
        summary = [r for r in lines if r["export"] == export and "summary" in r]
        assert len(records) == 70 + 6 + 1 and len(summary) == 1, (name, summary)
        wrong = [r for r in records if r["outcome"] == "wrong"]
        assert not wrong, (name, wrong[:5])
        print(name, summary[0])
        for signature in ("serving_default", "serving_text"):
            outcomes = {r["outcome"] for r in records if r["signature"] == signature}
            assert "answered" in outcomes, (name, signature, outcomes)
            if signature == "serving_default" or name != "ner":  # NER's one text input has no pair to mismatch
                assert "refused" in outcomes, (name, signature, outcomes)
        assert any(r["rows"] > 3 and r["outcome"] == "answered" for r in records), name  # calls in steps
        assert any(r["kind"] == "cross_rows" and r["outcome"] == "answered" for r in records), name
        assert [r["outcome"] for r in records if r["kind"] == "threads"] == ["answered"], name
        assert all(r["growth_mb"] is not None for r in records), name  # memory was measured


MEMORY_CHILD = r"""
import json, re, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401

def status(name):
    with open("/proc/self/status") as f:
        return int(re.search(name + r":\s+(\d+) kB", f.read()).group(1)) / 1024

export_dir, pairs = sys.argv[1], int(sys.argv[2])
serve = tf.saved_model.load(export_dir).signatures["serving_text"]
text = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)
serve(text_a=tf.constant([text]), text_b=tf.constant([text]))
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
out = serve(text_a=tf.constant([text] * pairs), text_b=tf.constant([text] * pairs))
print(json.dumps({"rows": int(out["label"].shape[0]), "growth_mb": status("VmHWM") - before}))
"""


@pytest.mark.slow
def test_a_big_request_runs_in_bounded_memory(exports):
    """4,000 max-length pairs to the classifier's serving_text, in a fresh process: answered whole, the peak
    memory growing by far less than the model's activations over 4,000 rows at once would take."""
    proc = assert_ran(subprocess.run([sys.executable, "-c", MEMORY_CHILD, exports["classifier"], "4000"],
                                     capture_output=True, text=True, timeout=900, env=script_env()))
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rows"] == 4000
    assert result["growth_mb"] < 150, result


def _refusals(exports):
    """Each export's answers (the shapes of its outputs) or refusals (InvalidArgumentError's message) of requests
    that break one rule each, by case."""
    out = {}

    def ask(key, function, **inputs):
        try:
            answer = function(**inputs)
            out[key] = {name: list(value.shape) for name, value in answer.items()}
        except tf.errors.InvalidArgumentError as err:
            out[key] = err.message

    for name, path in exports.items():
        loaded = tf.saved_model.load(path)
        ids, text = loaded.signatures["serving_default"], loaded.signatures["serving_text"]
        out[name + "/rows_per_step"] = int(loaded.rows_per_step.numpy())
        ones = tf.ones([2, 5], tf.int32)
        for case, inputs in {"no_position": [tf.zeros([2, 0], tf.int32)] * 3,
                             "too_wide": [tf.ones([1, 513], tf.int32)] * 3,
                             "mask_2": [ones, ones * 2, ones * 0], "mask_negative": [ones, -ones, ones * 0],
                             "shapes": [ones, tf.ones([3, 5], tf.int32), ones]}.items():
            ask(f"{name}/{case}", ids, **dict(zip(("input_ids", "input_mask", "segment_ids"), inputs)))
        for width in (0, 3, 600):
            empty = tf.zeros([0, width], tf.int32)
            ask(f"{name}/empty_{width}", ids, input_ids=empty, input_mask=empty, segment_ids=empty)
        names = [spec.name for spec in text.structured_input_signature[1].values()]
        one, two = tf.constant(["the dog ran"]), tf.constant(["the dog ran", "a cat"])
        if len(names) == 2:
            first, second = sorted(text.structured_input_signature[1])
            for case, (a, b) in {"1_and_2": (one, two), "2_and_1": (two, one), "2_and_0": (two, two[:0])}.items():
                ask(f"{name}/text_{case}", text, **{first: a, second: b})
            ask(f"{name}/text_empty", text, **{first: two[:0], second: two[:0]})
        else:
            ask(f"{name}/text_empty", text, sentence=two[:0])
            ask(f"{name}/text_ragged", text, sentence=tf.constant([" ".join(["dog"] * 5000)] + [""] * 1000))
    return out


@pytest.mark.slow
def test_malformed_requests_are_refused_naming_the_input(exports, tmp_path):
    """Each export: one InvalidArgumentError naming the input and the rule for rows of no
    position or of more than max_position_embeddings, an input_mask other than 0 and 1, unequal shapes, unequal
    rows of serving_text's two inputs (never broadcast), NER sentences whose dense answer would exceed
    serving.MAX_NER_TAGS; an empty batch of any width answered with no rows. --export_rows_per_step is recorded
    (loaded.rows_per_step), and a negative one is one error line before anything is written."""
    import tensorflow_text  # noqa: F401  (the tokenizer's ops)
    out = _refusals(exports)
    for name in exports:
        assert out[f"{name}/rows_per_step"] == 3
        for case, message in (("no_position", "input_ids must have at least 1 position per row"),
                              ("too_wide", "input_ids must have at most max_position_embeddings 512 positions"),
                              ("mask_2", "input_mask must be 0 (padding) or 1 (a token)"),
                              ("mask_negative", "input_mask must be 0 (padding) or 1 (a token)"),
                              ("shapes", "input_mask must have the shape of input_ids")):
            assert message in out[f"{name}/{case}"], (name, case, out[f"{name}/{case}"])
        for width in (0, 3, 600):
            assert all(shape[0] == 0 for shape in out[f"{name}/empty_{width}"].values()), (name, width)
        assert all(shape[0] == 0 for shape in out[f"{name}/text_empty"].values()), (name, out[f"{name}/text_empty"])
    for name, first, second in (("classifier", "text_a", "text_b"), ("squad", "question", "context")):
        for case in ("1_and_2", "2_and_1", "2_and_0"):
            assert f"{second} must have as many rows as {first}" in out[f"{name}/text_{case}"], (name, case)
    assert "sentence: the answer has a row per sentence" in out["ner/text_ragged"]
    assert_user_error(run_script("run_classifier.py", "--task_name=MRPC", f"--data_dir={tmp_path}",
                                 f"--vocab_file={vocab()}",
                                 f"--bert_config_file={tiny.config_file(tmp_path / 'bert_config.json')}",
                                 f"--output_dir={tmp_path / 'out'}", f"--export_dir={tmp_path / 'export'}",
                                 "--export_rows_per_step=-1"),
                      "--export_rows_per_step=-1: expected a number of rows (0: whole calls)")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------
# Exports in half precision and under XLA.


# Runs in a fresh process without the project on its path: serves the requests of requests.json through the
# SavedModels it names; writes every output and, with XLA_FLAGS=--xla_dump_to, XLA leaves one module per compile.
SERVE_SCRIPT = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # the tokenizer's ops
work = sys.argv[1]
requests = json.load(open(work + "/requests.json", encoding="utf-8"))
out = {}
for name, texts in requests["texts"].items():
    loaded = tf.saved_model.load(requests["exports"][name])
    text, ids = loaded.signatures["serving_text"], loaded.signatures["serving_default"]
    for i, (a, b) in enumerate(texts):
        got = text(text_a=tf.constant(a), text_b=tf.constant(b))
        out[f"{name}/text/{i}"] = got["probabilities"].numpy()
        out[f"{name}/label/{i}"] = np.array([label.decode() for label in got["label"].numpy()])
    for i, (rows, width) in enumerate(requests["ids"]):
        values = np.arange(rows * width, dtype=np.int32).reshape(rows, width) % 1000 + 1000
        got = ids(input_ids=tf.constant(values), input_mask=tf.ones([rows, width], tf.int32),
                  segment_ids=tf.zeros([rows, width], tf.int32))
        out[f"{name}/ids/{i}"] = got["probabilities"].numpy()
np.savez(work + "/served.npz", **out)
"""


def _serve(tmp_path, exports, texts, ids, **env):
    """SERVE_SCRIPT on the exports ({name: folder}) named by `texts` ({name: [(text_a list, text_b list), ...]}),
    each also given the token ids of `ids` ([(rows, width)])."""
    (tmp_path / "requests.json").write_text(json.dumps({"exports": exports, "texts": texts, "ids": ids}),
                                            encoding="utf-8")
    assert_ran(run_isolated(SERVE_SCRIPT, tmp_path, cwd=tmp_path, timeout=600, **env))
    return dict(np.load(str(tmp_path / "served.npz")))


def test_xla_module_traces_once_for_requests_of_every_batch_size_and_length():
    """In process: the XLA-compiled model function of an export is traced once, whatever the request's shape
    (packing.bucket and XLA_ROWS pad it: XLA compiles each padded shape once), and its outputs are those of the
    model called without XLA."""
    model = rc.ClassifierTask(tiny.config(num_hidden_layers=1, type_vocab_size=2, initializer_range=0.2),
                              2).build_model()
    options = ModelOptions(vocab_file=vocab(), max_seq_length=64)
    plain = serving.ClassifierServing(model, options, False, True)
    compiled = serving.ClassifierServing(model, options, False, True)
    compiled.compile_with_xla(packing.bucket_widths(64, 128))
    a, b = mrpc_pairs()
    rng = random.Random(3)
    for _ in range(12):
        rows = rng.choice([1, 2, 3, 5, 8])
        start = rng.randrange(len(a) - rows)
        got = compiled.serve_text(tf.constant(a[start:start + rows]), tf.constant(b[start:start + rows]))
        want = plain.serve_text(tf.constant(a[start:start + rows]), tf.constant(b[start:start + rows]))
        np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=1e-5)
    for width in (5, 64, 100):
        ids = tf.fill([3, width], 1000)
        got = compiled.serve_ids(ids, tf.ones_like(ids), tf.zeros_like(ids))
        np.testing.assert_allclose(got["probabilities"],
                                   plain.serve_ids(ids, tf.ones_like(ids), tf.zeros_like(ids))["probabilities"],
                                   atol=1e-5)
    assert compiled._xla_model.experimental_get_tracing_count() == 1
    assert compiled.serve_text.experimental_get_tracing_count() == 1


@pytest.mark.slow
def test_exports_in_half_precision_and_under_xla_answer_as_float32(mrpc_classifier, mrpc_export, tmp_path, caplog):
    """run_classifier.py --export_dir from one checkpoint (the session's MRPC classifier): float32 (the session's
    export, by the command line); --use_xla=true (the command line); --export_dtype=bfloat16 and float16 (mixed:
    half-precision matmuls; run_classifier.run, the command line's job). Served in a fresh process:
    - the XLA export answers 100 text requests of 1 to 13 pairs of 1 to 60 words, and ids 5 to 128 wide, as the
      float32 one, compiling at most one XLA module per padded shape (rows 1, 2, 4, 8, 16 by widths 32 and 64 for
      text, and 128 for ids), not one per request shape;
    - the half-precision exports predict the float32 export's labels on the 408 MRPC dev pairs (how many differ is
      printed): a label may differ only where float32's probability is within the half precision's rounding of
      0.5. benchmarks/bench_inference.py --parts=export_dtypes counts them for a fine-tuned MiniLM."""
    job = mrpc_classifier
    flags = dict(task_name="MRPC", vocab_file=job["vocab_file"], bert_config_file=job["config_file"],
                 init_checkpoint=job["checkpoint"], max_seq_length=job["max_seq_length"])
    # (--export_tflite beside --use_xla converts a plain float32 export of its own, LiteRT lacking the padding's
    # ops: test_litert_classifier.py's int8 model.)
    xla = assert_ran(run_script("run_classifier.py", *[f"--{k}={v}" for k, v in flags.items()], "--use_xla=true",
                                f"--output_dir={tmp_path / 'xla_run'}", f"--export_dir={tmp_path / 'xla'}",
                                quiet=True))
    assert "XLA at widths [32, 64, 128]" in xla.stderr
    assert "serving_text; float32; the model over at most 32 rows at a time)" in mrpc_export["log"]
    exports = {"xla": str(tmp_path / "xla"), "float32": mrpc_export["export_dir"]}
    for dtype in ("bfloat16", "float16"):
        caplog.clear()
        exports[dtype] = str(tmp_path / dtype)
        rc.run(cli.build_options(rc.ClassifierOptions, **flags, output_dir=str(tmp_path / f"{dtype}_run"),
                                 export_dir=exports[dtype], export_dtype=dtype))
        assert f"serving_text; {dtype}; the model over at most 32 rows at a time)" in caplog.text
    words = " ".join(mrpc_pairs()[0]).split()
    rng = random.Random(0)
    sizes = [rng.choice([1, 1, 2, 3, 5, 8, 13]) for _ in range(100)]
    texts = [[[" ".join(rng.choice(words) for _ in range(rng.randint(1, 60))) for _ in range(n)] for _ in "ab"]
             for n in sizes]
    ids = [(rows, width) for rows in (1, 3) for width in (5, 17, 64, 100, 128)]
    dump = tmp_path / "dump"
    dev = list(mrpc_pairs())
    served = _serve(tmp_path, exports, {"xla": texts, "float32": [dev] + texts, "bfloat16": [dev], "float16": [dev]},
                    ids, XLA_FLAGS=f"--xla_dump_to={dump} --xla_dump_hlo_as_text")
    for i in range(len(texts)):
        np.testing.assert_allclose(served[f"xla/text/{i}"], served[f"float32/text/{i + 1}"], atol=1e-5)
    for i in range(len(ids)):
        np.testing.assert_allclose(served[f"xla/ids/{i}"], served[f"float32/ids/{i}"], atol=1e-5)
    compiles = [name for name in os.listdir(dump) if name.endswith(".before_optimizations.txt")]
    row_buckets = {min(r for r in serving.XLA_ROWS if r >= n) for n in sizes + [1, 3]}
    assert row_buckets == {1, 2, 4, 8, 16}
    assert 3 <= len(compiles) <= len(row_buckets) * 2 + 2, sorted(compiles)
    print(f"XLA: {len(compiles)} compiles for {len(texts) + len(ids)} requests")

    labels, probabilities = served["float32/label/0"], served["float32/text/0"][:, 1]
    assert len(labels) == 408 and len(set(labels)) == 2
    for dtype, rounding in (("bfloat16", 0.02), ("float16", 0.002)):
        differ = served[f"{dtype}/label/0"] != labels
        largest = np.abs(served[f"{dtype}/text/0"][:, 1] - probabilities).max()
        print(f"{dtype}: {differ.sum()} of 408 MRPC dev labels differ from float32's; the largest probability "
              f"difference is {largest:.4f}")
        assert largest < rounding, dtype
        assert np.all(np.abs(probabilities[differ] - 0.5) < rounding), (dtype, probabilities[differ])
