"""Turns raw text (plain text, WikiExtractor's output, JSON lines) into the input of create_pretraining_data.py:
one sentence per line, a blank line between documents.

  python prepare_corpus.py --input_file='extracted/*/wiki_*' --output_file=corpus/wiki.txt --num_workers=16
  python prepare_corpus.py --input_file=books/*.txt --output_file=corpus/books.txt
  python prepare_corpus.py --input_file=c4-*.json --input_format=jsonl --text_field=text --output_file=corpus/c4.txt

The formats, what a document is and the segmenter are corpus_text.py's (its docstring says how each is read). With
--num_workers=N > 1, N processes share the input (its bytes cut into N ranges, each document read by the worker
its first line falls to) and worker k writes PATH-0000k-of-0000N: the same flags give the same files. The counts
(documents, sentences, what was dropped and why) are logged.
"""
import contextlib
import dataclasses
import multiprocessing
import time

from absl import logging

import cli
import corpus_text
import filesystem


@dataclasses.dataclass
class PrepareCorpusOptions:
    """prepare_corpus.py's flags."""
    input_file: str = cli.option(None, "Input files: comma-separated names or globs, on any file system TensorFlow "
                                 "reads (gs://...).", required=True)
    output_file: str = cli.option(None, "The corpus to write (one sentence per line, a blank line between "
                                  "documents); with --num_workers=N > 1, the N shards PATH-0000k-of-0000N.",
                                  required=True)
    input_format: str = cli.option(
        "auto", "auto: each file's own, told by its first line (<doc ...>: WikiExtractor; a JSON object: "
        "WikiExtractor --json when it has url, title and text, else jsonl; otherwise text). text: plain UTF-8, "
        "blank lines between paragraphs. wikiextractor: WikiExtractor's <doc> blocks or --json lines, one document "
        "per article. jsonl: one JSON object per line, the text in --text_field (each of its lines a paragraph).",
        enum=corpus_text.FORMATS)
    text_field: str = cli.option("text", "jsonl: the field that holds each document's text.")
    text_document: str = cli.option(
        "file", "text: what a document is. file (default, for books and articles: one per file); paragraph (each "
        "blank-line paragraph, for files of short independent texts); heading (the paragraphs up to the next heading, "
        "a one-line paragraph of a few words without final punctuation such as 'CHAPTER IV' or ' = History = ', "
        "which is left out: for files holding many articles or chapters).", enum=corpus_text.TEXT_DOCUMENTS)
    keep_title: bool = cli.option(False, "wikiextractor: keep each article's title line as its first sentence.")
    language: str = cli.option("en", "The text's language (ISO 639 code) for the segmenter's rules "
                               "(abbreviations); Chinese and Japanese full stops end sentences in any language.")
    num_workers: int = cli.option(1, "Processes, each writing its own output shard (more than 1: "
                                  "PATH-0000k-of-0000N).")
    min_words_per_sentence: int = cli.option(0, "Drop sentences of fewer words (whitespace-separated; a Chinese "
                                             "sentence is one). 0: keep all.")
    min_sentences_per_document: int = cli.option(1, "Drop documents of fewer sentences (1: only empty ones).")


def _worker(job):
    """One worker: reads its byte range of the input, writes its output file; returns its counts."""
    options, parts, path = job["options"], job["parts"], job["path"]
    reader = corpus_text.Reader(options.input_format, options.text_document, options.text_field, options.keep_title)
    segmenter = corpus_text.Segmenter(options.language)
    start = time.time()
    read_bytes = 0
    try:
        with filesystem.open_file(path, "w", newline="\n") as out:
            writer = corpus_text.CorpusWriter(out, segmenter, options.min_words_per_sentence,
                                              options.min_sentences_per_document)
            for file_path, lo, hi in parts:
                writer.write_events(reader.documents(file_path, lo, hi))
                read_bytes += hi - lo
    except BaseException:
        filesystem.remove_file(path)
        raise
    return {"worker": job["worker"], "path": path, "write": writer.stats, "read": reader.stats,
            "bytes": read_bytes, "seconds": time.time() - start}


def run(options):
    """Writes the corpus of options (PrepareCorpusOptions); returns {output path: its WriteStats}."""
    start = time.time()
    input_files = filesystem.input_files(options.input_file, "--input_file")
    if options.num_workers < 1:
        raise cli.UserError(f"--num_workers={options.num_workers}: expected 1 or more")
    corpus_text.Reader(options.input_format, options.text_document, options.text_field)  # checks the flags
    corpus_text.CorpusWriter(None, corpus_text.Segmenter(options.language), options.min_words_per_sentence,
                             options.min_sentences_per_document)
    if filesystem.isdir(options.output_file or ""):
        raise cli.UserError(f"--output_file={options.output_file}: is a folder, expected a file name")
    sizes = [filesystem.file_size(path) for path in input_files]
    num = options.num_workers
    paths = [options.output_file] if num == 1 else [filesystem.shard_path(options.output_file, k, num)
                                                     for k in range(num)]
    clash = sorted(set(map(filesystem.normpath, paths)) & set(map(filesystem.normpath, input_files)))
    if clash:
        raise cli.UserError(f"--output_file={options.output_file}: would overwrite the input file {clash[0]}")
    jobs = [{"worker": k, "options": options, "path": paths[k],
             "parts": filesystem.range_parts(input_files, sizes, lo, hi)}
            for k, (lo, hi) in enumerate(filesystem.byte_ranges(sizes, num))]
    filesystem.make_parent_dir(options.output_file, "--output_file")
    logging.info("%d input files, %.1f MB, %d worker(s)", len(input_files), sum(sizes) / 1e6, num)
    try:
        with contextlib.ExitStack() as stack:  # one worker runs in this process
            pool = stack.enter_context(multiprocessing.get_context("fork").Pool(num)) if num > 1 else None
            results = pool.map(_worker, jobs, chunksize=1) if pool else [_worker(jobs[0])]
    except BaseException:
        for path in paths:
            filesystem.remove_file(path)
        raise
    write, read = corpus_text.WriteStats(), corpus_text.ReadStats()
    for result in results:
        write.add(result["write"])
        read.add(result["read"])
        logging.info("worker %d: %s: %d documents, %d sentences from %.1f MB in %.1f s (%.2f MB/s)",
                     result["worker"], result["path"], result["write"].documents, result["write"].sentences,
                     result["bytes"] / 1e6, result["seconds"], result["bytes"] / 1e6 / max(result["seconds"], 1e-9))
    elapsed = time.time() - start
    logging.info("Wrote %d documents, %d sentences, %d words to %s in %.1f s (%.2f MB/s of input)", write.documents,
                 write.sentences, write.words, options.output_file if num == 1 else f"{num} shards "
                 f"{paths[0]} ... {paths[-1]}", elapsed, sum(sizes) / 1e6 / max(elapsed, 1e-9))
    logging.info("Dropped: %d empty documents, %d documents of fewer than %d sentences, %d sentences of fewer than "
                 "%d words; left out %d headings (--text_document=heading), %d titles (WikiExtractor, "
                 "--keep_title=false); %d paragraphs longer than %d characters cut at a line end",
                 write.empty_documents, write.short_documents, options.min_sentences_per_document,
                 write.short_sentences, options.min_words_per_sentence, read.headings, read.titles,
                 read.cut_paragraphs, corpus_text.MAX_PARAGRAPH_CHARS)
    if write.documents == 0:
        logging.warning("No document written: the input holds no text that gives sentences (%s)",
                        ", ".join(input_files[:5]))
    return {result["path"]: result["write"] for result in results}


if __name__ == "__main__":
    cli.main(PrepareCorpusOptions, run)
