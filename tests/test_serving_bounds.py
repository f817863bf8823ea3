"""What serving_text reads of a request (serving.bounded_text, litert_classifier.bounded_text): a cut never
changes the first tokens, a text whose first tokens it cannot keep and an oversized request are refused, and a
50 MB request is answered as its first tokens alone in bounded memory, by the SavedModel and the LiteRT model."""
import os
import random
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import fast_tokenization
import litert_classifier
import model_options
import modeling
import serving
import tokenization

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    return modeling.BertConfig(vocab_size=size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=64, initializer_range=0.5)


def _options(vocab_file):
    return model_options.ModelOptions(vocab_file=vocab_file, do_lower_case=True, max_seq_length=MAX_SEQ_LENGTH)


def test_squad_cuts_a_long_question_and_refuses_a_context_over_the_limit(vocab_file):
    tf.keras.utils.set_random_seed(2)
    module = serving.SquadServing(modeling.SquadModel(_tiny_config(vocab_file)), _options(vocab_file),
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
    model = modeling.ClassifierModel(_tiny_config(vocab_file), 3, per_token=True)
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
    import json
    config = _tiny_config(vocab_file)
    tf.keras.utils.set_random_seed(3)
    model = modeling.ClassifierModel(config, 3)
    model.head.output_weights.assign(model.head.output_weights * 20.0)
    checkpoints.CheckpointManager(str(tmp_path / "ckpt")).save(model.variables_by_name(), 0)
    export_dir = str(tmp_path / "export")
    serving.export_saved_model(export_dir, lambda: modeling.ClassifierModel(config, 3),
                               str(tmp_path / "ckpt" / "model.ckpt-0"),
                               lambda m: serving.ClassifierServing(m, _options(vocab_file), False, False,
                                                                   ["a", "b", "c"]), rows_per_step=None)
    tflite = litert_classifier.export(str(tmp_path / "model.tflite"), export_dir, _options(vocab_file), False)
    first = "return the file path of the module loader, naïve café σας"
    request = tmp_path / "request.txt"
    request.write_bytes((first + " " + "the quick brown fox jumps over the lazy dog. " * 1_200_000).encode()[:50_000_000])
    for kind, path in (("saved_model", export_dir), ("litert", tflite)):
        result = subprocess.run([sys.executable, "-c", ANSWER_BIG_REQUEST, kind, path, str(request), first],
                                cwd=tmp_path,
                                capture_output=True, text=True, timeout=600,
                                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert result.returncode == 0, result.stderr[-3000:]
        answer = json.loads(result.stdout.strip().splitlines()[-1])
        assert answer["label"][0] == answer["label"][1], (kind, answer)
        np.testing.assert_allclose(*answer["probabilities"], atol=1e-5)
        assert answer["peak_increase_mb"] < 40, (kind, answer)
