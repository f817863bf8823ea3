"""prepare_corpus.py and corpus_text.py's readers and writer: raw text (plain text, WikiExtractor's two forms, JSON
lines) into one sentence per line with blank lines between documents, byte ranges, workers, bad input, and the
chain prepare_corpus.py -> create_pretraining_data.py -> run_pretraining.py through the command lines (the
segmenter: tests/test_corpus_text.py)."""
import glob
import json
import os
import random
import re
import subprocess
import sys

import pytest

import cli
import corpus_text
import prepare_corpus
from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable


def _run(script, *flags, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    return subprocess.run([PYTHON, os.path.join(ROOT, script), *flags], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _documents(path):
    """The documents (lists of sentences) of a written corpus; checks its shape on the way."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text == "" or text.endswith("\n\n"), text[-200:]
    documents = [block.split("\n") for block in text.split("\n\n") if block]
    for document in documents:
        assert all(s and s == s.strip() and "  " not in s for s in document), document[:5]
    return documents


def _chars(texts):
    return "".join("".join(texts).split())


# ---------------------------------------------------------------------------------------------------------
# Formats, documents, byte ranges.

def _wikitext_articles(limit):
    """[(title, [paragraphs])] of wikitext-2's valid articles (top-level ' = Title = ' headings)."""
    articles = []
    with open(shared_path("data", "text", "wikitext-2", "valid.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            match = re.fullmatch(r"= ([^=].*[^=]) =", line)
            if match:
                if len(articles) == limit:
                    break
                articles.append((match.group(1), []))
            elif line and articles and not line.startswith("="):
                articles[-1][1].append(line)
    return articles


def _write_wikiextractor(path, articles, as_json=False):
    """Articles as WikiExtractor writes them (& < > as HTML entities, as it does by default)."""
    escape = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    with open(path, "w", encoding="utf-8") as f:
        for k, (title, paragraphs) in enumerate(articles):
            if as_json:
                f.write(json.dumps({"id": str(k), "revid": "", "url": f"https://en.wikipedia.org/wiki?curid={k}",
                                    "title": title, "text": "\n".join(escape(p) for p in paragraphs)}) + "\n")
            else:
                f.write(f'<doc id="{k}" url="https://en.wikipedia.org/wiki?curid={k}" title="{escape(title)}">\n'
                        f"{escape(title)}\n\n" + "".join(escape(p) + "\n" for p in paragraphs) + "\n</doc>\n")


@pytest.mark.parametrize("as_json", [False, True])
def test_wikiextractor_output_through_the_command_line(tmp_path, as_json):
    """One document per article with text, titles left out, every character of the text kept, in either form."""
    articles = _wikitext_articles(40)
    articles.append(("Empty article", []))
    source = tmp_path / "extracted" / "AA" / "wiki_00"
    source.parent.mkdir(parents=True)
    _write_wikiextractor(source, articles, as_json)
    out = tmp_path / "corpus.txt"
    result = _run("prepare_corpus.py", f"--input_file={tmp_path}/extracted/*/wiki_*", f"--output_file={out}")
    assert result.returncode == 0, result.stderr
    documents = _documents(out)
    with_text = [(title, paragraphs) for title, paragraphs in articles if paragraphs]
    assert len(documents) == len(with_text) == 40
    for document, (title, paragraphs) in zip(documents, with_text):
        assert _chars(document) == _chars(paragraphs)
        assert document[0] != title
    assert "Wrote 40 documents" in result.stderr and "1 empty documents" in result.stderr
    # <doc> blocks repeat the title as their first line; --json's text does not (the title is its own field)
    assert ("0 titles" if as_json else "41 titles") in result.stderr
    kept = _run("prepare_corpus.py", f"--input_file={source}", f"--output_file={tmp_path / 'titled.txt'}",
                "--keep_title")
    assert kept.returncode == 0, kept.stderr
    titled = _documents(tmp_path / "titled.txt")
    assert len(titled) == len(articles)
    for document, (title, paragraphs) in zip(titled, articles):
        assert _chars(document) == _chars([title] + paragraphs)


def test_book_and_jsonl_through_the_command_line(tmp_path):
    """A Gutenberg book (plain text, the whole file one document, hard-wrapped lines joined) and JSON lines with the
    text in a field of the user's choice, auto-detected side by side in one run."""
    book = shared_path("data", "text", "gutenberg", "austen-persuasion.txt")
    with open(shared_path("data", "text", "conll_train_docs.txt"), encoding="utf-8") as f:
        conll = [block.split("\n") for block in f.read().strip().split("\n\n")][:60]
    jsonl = tmp_path / "news.jsonl"
    with open(jsonl, "w", encoding="utf-8") as f:
        for k, document in enumerate(conll):
            f.write(json.dumps({"id": k, "body": "\n".join(document), "meta": {"source": "reuters"}},
                               ensure_ascii=k % 2 == 0) + "\n")
    out = tmp_path / "corpus.txt"
    result = _run("prepare_corpus.py", f"--input_file={book},{jsonl}", f"--output_file={out}", "--text_field=body")
    assert result.returncode == 0, result.stderr
    documents = _documents(out)
    assert len(documents) == 1 + len(conll)
    with open(book, encoding="utf-8") as f:
        assert _chars(documents[0]) == _chars([f.read()])
    assert len(documents[0]) > 2000 and max(len(s) for s in documents[0]) < 5000
    assert "Anne" in " ".join(documents[0][:400])
    for document, source in zip(documents[1:], conll):
        assert _chars(document) == _chars(source)


def test_text_documents_by_paragraph_and_by_heading(tmp_path):
    source = tmp_path / "articles.txt"
    source.write_text(" = First Article = \n\n It began in 1990 . It grew fast . \n Then it stopped .\n\n"
                      " = = History = = \n\n Nobody knows why .\n\n = Second Article = \n\nShort text here.\n",
                      encoding="utf-8")
    by_heading = prepare_corpus.run(prepare_corpus.PrepareCorpusOptions(
        input_file=str(source), output_file=str(tmp_path / "h.txt"), text_document="heading"))
    assert _documents(tmp_path / "h.txt") == [["It began in 1990 .", "It grew fast .", "Then it stopped ."],
                                              ["Nobody knows why ."], ["Short text here."]]
    assert by_heading[str(tmp_path / "h.txt")].documents == 3
    prepare_corpus.run(prepare_corpus.PrepareCorpusOptions(
        input_file=str(source), output_file=str(tmp_path / "p.txt"), text_document="paragraph"))
    assert len(_documents(tmp_path / "p.txt")) == 6  # the headings are paragraphs of their own here


def _range_documents(reader, path, cuts):
    """Documents (lists of paragraphs) read range by range, the file cut at `cuts`."""
    documents = []
    bounds = [0] + cuts + [os.path.getsize(path)]
    for lo, hi in zip(bounds, bounds[1:]):
        for event in reader.documents(path, lo, hi):
            if isinstance(event, corpus_text.Document):
                documents.append([])
            else:
                documents[-1].append(event)
    return documents


@pytest.mark.parametrize("input_format, text_document", [("wikiextractor", "file"), ("jsonl", "file"),
                                                         ("text", "paragraph"), ("text", "heading"),
                                                         ("text", "file")])
def test_byte_ranges_read_every_document_once(tmp_path, input_format, text_document):
    """Wherever the cuts fall, the ranges together read the whole file's documents, each once, in order."""
    articles = _wikitext_articles(25)
    path = str(tmp_path / "input")
    if input_format == "wikiextractor":
        _write_wikiextractor(path, articles)
    elif input_format == "jsonl":
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": "\n".join(p)}) + "\n\n" for _, p in articles)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f" = {title} = \n\n" + "".join(p + "\n\n" for p in paragraphs)
                         for title, paragraphs in articles)
    reader = corpus_text.Reader(input_format, text_document)
    whole = _range_documents(reader, path, [])
    assert len(whole) == 1 if text_document == "file" and input_format == "text" else len(whole) >= 25
    rng = random.Random(7)
    size = os.path.getsize(path)
    for _ in range(12):
        cuts = sorted(rng.sample(range(1, size), rng.randint(1, 8)))
        assert _range_documents(reader, path, cuts) == whole, cuts


def test_workers_write_shards_that_add_up_to_one_run(tmp_path):
    """--num_workers=3: three shards, the same documents as one worker in the same order, the same bytes on a
    second run."""
    articles = _wikitext_articles(60)
    for k in range(3):
        folder = tmp_path / "extracted" / f"A{k}"
        folder.mkdir(parents=True)
        _write_wikiextractor(folder / "wiki_00", articles[k * 20:(k + 1) * 20], as_json=k == 1)
    inputs = f"{tmp_path}/extracted/*/wiki_*"
    result = _run("prepare_corpus.py", f"--input_file={inputs}", f"--output_file={tmp_path / 'one.txt'}")
    assert result.returncode == 0, result.stderr
    for run in ("a", "b"):
        result = _run("prepare_corpus.py", f"--input_file={inputs}", f"--output_file={tmp_path / run / 'c.txt'}",
                      "--num_workers=3")
        assert result.returncode == 0, result.stderr
    shards = sorted(glob.glob(str(tmp_path / "a" / "c.txt-*")))
    assert [os.path.basename(p) for p in shards] == [f"c.txt-0000{k}-of-00003" for k in range(3)]
    assert sum((_documents(p) for p in shards), []) == _documents(tmp_path / "one.txt")
    for shard in shards:
        with open(shard, "rb") as a, open(shard.replace(f"{os.sep}a{os.sep}", f"{os.sep}b{os.sep}"), "rb") as b:
            assert a.read() == b.read()
    assert "Wrote 60 documents" in result.stderr


def test_filters_drop_and_count(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps({"text": t}) for t in [
        "One short. This sentence has five words.", "Only one sentence of enough words here.", "   ",
        "First sentence of this document. Second sentence of this document."]) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    stats = prepare_corpus.run(prepare_corpus.PrepareCorpusOptions(
        input_file=str(source), output_file=str(out), min_words_per_sentence=3, min_sentences_per_document=2))
    assert _documents(out) == [["First sentence of this document.", "Second sentence of this document."]]
    counts = stats[str(out)].as_dict()
    assert counts == {"documents": 1, "sentences": 2, "words": 10, "empty_documents": 1, "short_documents": 2,
                      "short_sentences": 1}


# ---------------------------------------------------------------------------------------------------------
# Bad input: one error line naming the file and line; no output left.

@pytest.mark.parametrize("content, flags, message", [
    (b"Good line.\n\nAnother \xff\xfe line.\n", (), "line 3: not valid UTF-8"),
    (b'{"text": "fine"}\n{"text": "broken\n', ("--input_format=jsonl",), "line 2: not valid JSON"),
    (b'{"text": "fine"}\n{"title": "x", "body": "y"}\n', (), "line 2: the object has no field 'text' (its fields: "
                                                             "body, title)"),
    (b'{"text": "fine"}\n["a list"]\n', (), "line 2: expected a JSON object, got list"),
    (b'{"text": 3}\n', (), "line 1: field 'text' is int, expected a string"),
    (b'<doc id="1" url="u" title="A">\nA\n\nText.\n<doc id="2" url="u" title="B">\nB\n</doc>\n', (),
     "line 5: a <doc> inside the <doc> opened at line 1"),
    (b'<doc id="1" url="u" title="A">\nA\n\nText that never ends.\n', (), "line 1: this <doc> has no </doc>"),
    (b'<doc id="1" url="u" title="A">\nA\n</doc>\nstray text\n', (), "line 4: text outside a <doc ...>"),
])
def test_bad_input_is_one_error_line(tmp_path, content, flags, message):
    source = tmp_path / "bad.txt"
    source.write_bytes(content)
    out = tmp_path / "out" / "corpus.txt"
    result = _run("prepare_corpus.py", f"--input_file={source}", f"--output_file={out}", *flags)
    assert result.returncode == cli.EXIT_USER_ERROR, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0] == result.stderr.strip().splitlines()[-1], result.stderr
    assert lines[0].startswith(f"error: {source} {message}"), lines[0]
    assert "Traceback" not in result.stderr and not out.exists()


def test_flags_and_helpfull():
    result = _run("prepare_corpus.py", "--helpfull")
    for flag in ("--input_format", "--text_field", "--text_document", "keep_title", "--language", "--num_workers",
                 "--min_words_per_sentence", "--min_sentences_per_document"):
        assert flag in result.stdout
    assert "heading" in result.stdout and "CHAPTER IV" in result.stdout
    same = _run("prepare_corpus.py", f"--input_file={ROOT}/README.md", f"--output_file={ROOT}/./README.md")
    assert same.returncode == cli.EXIT_USER_ERROR and "would overwrite the input file" in same.stderr
    missing = _run("prepare_corpus.py", "--input_file=/nonexistent/*.txt", "--output_file=/tmp/x.txt")
    assert missing.returncode == cli.EXIT_USER_ERROR
    assert missing.stderr.strip().splitlines()[-1].startswith("error: --input_file pattern")


# ---------------------------------------------------------------------------------------------------------
# The chain, as a user types it.

@pytest.mark.slow
def test_chain_prepare_corpus_create_pretraining_data_run_pretraining(tmp_path):
    """A WikiExtractor extract -> prepare_corpus.py -> create_pretraining_data.py -> run_pretraining.py (a tiny model,
    a few steps), each through its command line."""
    _write_wikiextractor(tmp_path / "wiki_00", _wikitext_articles(30))
    vocab = shared_path("vocab", "uncased", "vocab.txt")
    corpus = tmp_path / "corpus" / "wiki.txt"
    steps = [
        ("prepare_corpus.py", f"--input_file={tmp_path / 'wiki_00'}", f"--output_file={corpus}", "--num_workers=2"),
        ("create_pretraining_data.py", f"--input_file={corpus}-*", f"--output_file={tmp_path / 'records.tfrecord'}",
         f"--vocab_file={vocab}", "--do_lower_case=True", "--max_seq_length=64", "--max_predictions_per_seq=10",
         "--dupe_factor=1"),
    ]
    for step in steps:
        result = _run(*step)
        assert result.returncode == 0, result.stderr[-3000:]
    instances = int(re.search(r"Wrote (\d+) total instances", result.stderr).group(1))
    assert instances > 100
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps({"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
                                  "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
                                  "type_vocab_size": 2}))
    result = _run("run_pretraining.py", f"--input_file={tmp_path / 'records.tfrecord'}",
                  f"--output_dir={tmp_path / 'pretraining'}", "--do_train=True", "--do_eval=True",
                  f"--bert_config_file={config}", "--train_batch_size=8", "--eval_batch_size=8",
                  "--max_seq_length=64", "--max_predictions_per_seq=10", "--num_train_steps=4", "--num_warmup_steps=1",
                  "--max_eval_steps=2", "--learning_rate=1e-3", "--save_checkpoints_steps=4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.exists(tmp_path / "pretraining" / "model.ckpt-4.index")
    with open(tmp_path / "pretraining" / "eval_results.txt", encoding="utf-8") as f:
        assert "masked_lm_accuracy" in f.read()
