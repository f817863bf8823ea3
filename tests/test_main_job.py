"""main_job.py: the built-in corpus and classification data, and a reduced end-to-end run."""
import os

import pytest

import main_job


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
    assert main_job.split_sentences(text) == [
        "Return the value, e.g. a number (i.e. an int).", "The second sentence ends here!", "Is it a question?",
        "See Mr. Smith for details. x = f(y) + 2;"]
    doc = ("Summary line of the function.\n\nA longer paragraph that explains\nwhat the function does.\n\n"
           "    indented_code(block)\n\n>>> doctest_line()\n42\n\nArgs:\n    x: the input value.")
    assert main_job.docstring_sentences(doc) == [
        "Summary line of the function.", "A longer paragraph that explains what the function does."]
    assert not main_job.is_prose_sentence("self.assertEqual(a, b) == {'x': 1}.")
    assert not main_job.is_prose_sentence("Too short.")
    assert not main_job.is_prose_sentence("Encoding basic Python object hierarchies::")


def test_classification_splits(documents, tmp_path):
    splits = main_job.build_classification_splits(documents)
    labels = set(main_job.DEFAULT_LABELS)
    seen = {}
    for name, rows in splits.items():
        assert rows
        assert {label for _, label in rows} == labels
        for sentence, label in rows:
            assert seen.setdefault(sentence, (name, label)) == (name, label), sentence  # no leaks or clashes
    counts = {label: sum(1 for _, l in splits["train"] if l == label) for label in labels}
    assert len(set(counts.values())) == 1 and min(counts.values()) >= 150
    assert len(splits["dev"]) >= 100 and len(splits["test"]) >= 50
    # Same seed, same data.
    assert main_job.build_classification_splits(documents) == splits
    path = tmp_path / "train.tsv"
    main_job.write_tsv(splits["train"], str(path))
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "label\tsentence" and len(lines) == len(splits["train"]) + 1
    assert all(len(line.split("\t")) == 2 for line in lines)
    with pytest.raises(ValueError, match="--labels: packages \\['no_such_package'\\]"):
        main_job.build_classification_splits(documents, labels=("json", "no_such_package"))


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
