"""Raw text as documents of sentences, the input create_pretraining_data.py reads: the sentence segmenter, the
readers of the formats text comes in, and the writer of one sentence per line with blank lines between documents.
prepare_corpus.py runs them over files; main_job.py segments its docstrings with the same segmenter.

Segmentation: sentencex (Wikimedia's rule-based segmenter for ~300 languages, chosen by measurement:
benchmarks/SEGMENTATION.md) splits each paragraph, then a thin layer of ours mends two of its habits:
  * a piece that is only a list marker ("1.", "2)", "b.", "(iv)", "•") is joined to the item it numbers;
  * a piece that begins with a lower-case letter (after opening quotes or brackets) is joined to the one before
    ("approx. three", '"Why?" he asked'): an abbreviation the library does not know, or a quote that does not end
    the sentence. Only in cased text: in a paragraph without any upper-case letter pieces are left as they are.
Chinese and Japanese full stops (。！？) end sentences in every language (sentencex splits them whatever the
language code; tests/test_corpus_text.py keeps that checked). A sentence's whitespace runs (newlines included)
become single spaces.

Formats (Reader; "auto" tells them apart by a file's first non-blank line):
  text            plain UTF-8; a blank line ends a paragraph, the lines of a paragraph are joined by spaces. What a
                  document is: the whole file (`file`: a book or an article per file), each paragraph
                  (`paragraph`), or the paragraphs up to the next heading (`heading`: a one-line paragraph without
                  sentence-final punctuation, at most HEADING_MAX_WORDS words; the heading itself is left out).
  wikiextractor   WikiExtractor's output: `<doc id=.. url=.. title=..>` blocks whose first line repeats the title
                  and whose other lines are paragraphs, or its --json lines ({"id", "url", "title", "text"}): one
                  document per article, the title left out unless asked for (then its first sentence); the HTML entities WikiExtractor
                  writes for &, < and > are turned back into those characters.
  jsonl           one JSON object per line (HF datasets, C4, OSCAR exports), the text in a field named by the user;
                  each line of that text is a paragraph, each object a document.

Streaming: a reader holds one line, a paragraph (a longer one than MAX_PARAGRAPH_CHARS is cut at a line end) and,
the writer, the sentences of a document only until it has the minimum asked for. Byte ranges: a reader given
[start, end) yields the documents that begin in it, each document to exactly one range (the rules in
Reader.documents), so that workers can share files.

Bad input: invalid UTF-8, a line that is not a JSON object, a missing or non-text field, broken <doc> blocks end in
a cli.UserError naming the file and line.
"""
import collections
import html
import json
import re

import cli
import filesystem

HEADING_MAX_WORDS = 12
MAX_PARAGRAPH_CHARS = 1 << 20
FORMATS = ("auto", "text", "wikiextractor", "jsonl")
TEXT_DOCUMENTS = ("file", "paragraph", "heading")

# ---------------------------------------------------------------------------------------------------------
# Sentence segmentation.

# A piece that only numbers or bullets the item after it.
_LIST_MARKER = re.compile(r"^[(\[]?(?:\d{1,3}|[A-Za-z]|[ivxlcdmIVXLCDM]{1,6})[.)\]]{1,2}$|^[•◦▪‣∙·*-]$")
# Opening quotes and brackets before a piece's first letter.
_OPENERS = "\"'“‘«‹([{¿¡"


class Segmenter:
    """Splits text into sentences (see the module docstring): sentencex with our thin layer. `language`: an ISO
    639 code (sentencex's rules for it: abbreviations, its full stops; unknown codes fall back to its defaults)."""

    def __init__(self, language="en"):
        import sentencex  # pylint: disable=import-outside-toplevel
        if not isinstance(language, str) or not re.fullmatch(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*", language):
            raise cli.UserError(f"--language={language!r}: expected a language code such as en, de or zh")
        self.language = language
        self._segment = sentencex.segment

    def split(self, text):
        """The sentences of `text` (a paragraph; its line breaks are spaces), whitespace runs made single spaces."""
        text = " ".join(text.split())
        if not text:
            return []
        pieces = [piece.strip() for piece in self._segment(self.language, text)]
        pieces = [piece for piece in pieces if piece]
        if len(pieces) < 2:
            return pieces
        cased = any(c.isupper() for c in text)
        out = []
        for piece in pieces:
            if out and ((len(out[-1]) <= 8 and _LIST_MARKER.match(out[-1])) or
                        (cased and (piece[0].islower() or piece[0] in _OPENERS) and _starts_lower(piece))):
                out[-1] = out[-1] + " " + piece
            else:
                out.append(piece)
        return out


def _starts_lower(piece):
    first = piece.split(" ", 1)
    if len(first) > 1 and _LIST_MARKER.match(first[0]):
        return False  # "b) Install the software."
    for c in piece:
        if c in _OPENERS:
            continue
        return c.islower()
    return False


_SEGMENTERS = {}


def split_sentences(text, language="en"):
    """Segmenter(language).split(text), the segmenter made once per language."""
    segmenter = _SEGMENTERS.get(language)
    if segmenter is None:
        segmenter = _SEGMENTERS[language] = Segmenter(language)
    return segmenter.split(text)


# ---------------------------------------------------------------------------------------------------------
# Reading: lines, formats.

def decode_line(raw, path, offset):
    """A line of `path` (bytes at byte `offset`) as text; invalid UTF-8 is an error naming the file, line and byte."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise cli.UserError(f"{path} line {filesystem.line_number(path, offset)}: not valid UTF-8 ({err.reason} at "
                            f"byte {offset + err.start}); input files must be UTF-8 text") from None
    return text[1:] if offset == 0 and text.startswith("\ufeff") else text


class _Lines:
    """The decoded lines of a file from byte `start` (snapped to the next line start), with their byte offsets;
    peek(k) looks k lines ahead."""

    def __init__(self, path, start=0):
        self.path = path
        self._raw = filesystem.read_lines(path, start)
        self._ahead = collections.deque()

    def peek(self, k=0):
        while len(self._ahead) <= k:
            item = next(self._raw, None)
            if item is None:
                return None
            self._ahead.append((item[0], decode_line(item[1], self.path, item[0])))
        return self._ahead[k]

    def next(self):
        item = self.peek()
        if item is not None:
            self._ahead.popleft()
        return item

    def error(self, offset, message):
        return cli.UserError(f"{self.path} line {filesystem.line_number(self.path, offset)}: {message}")


def _is_heading(line):
    """A line that can stand alone as a heading: a few words without sentence-final punctuation."""
    line = line.strip()
    return bool(line) and len(line.split()) <= HEADING_MAX_WORDS and line[-1] not in ".!?。！？…:;,\"'”’)»"


def _blank(item):
    return item is not None and not item[1].strip()


Document = collections.namedtuple("Document", "offset")
Document.__doc__ = "A reader's event: a new document begins (at byte `offset` of its file)."


class ReadStats:
    """What a reader skipped: headings (text, heading documents), titles (WikiExtractor), paragraphs cut at
    MAX_PARAGRAPH_CHARS."""

    def __init__(self):
        self.headings = self.titles = self.cut_paragraphs = 0

    def add(self, other):
        self.headings += other.headings
        self.titles += other.titles
        self.cut_paragraphs += other.cut_paragraphs


class Reader:
    """How one input format is read: documents(path, start, end) yields Document events, each followed by the
    paragraphs (str) of that document, for the documents of `path` that begin in byte range [start, end)
    (end=None: to the end of the file).

    A document begins at: its file's start (text, file documents: only there); the line after a blank line
    (paragraph documents); the line after a blank line that is a heading followed by a blank line or the end
    (heading documents); a `<doc` line (WikiExtractor); a line (JSON lines). A range that starts inside a file
    skips to the first such beginning at or after `start`; it reads on past `end` to the end of its last document,
    so that every document is read in exactly one range."""

    def __init__(self, input_format="auto", text_document="file", text_field="text", keep_title=False):
        if input_format not in FORMATS:
            raise cli.UserError(f"--input_format={input_format!r}: expected one of {', '.join(FORMATS)}")
        if text_document not in TEXT_DOCUMENTS:
            raise cli.UserError(f"--text_document={text_document!r}: expected one of {', '.join(TEXT_DOCUMENTS)}")
        if not text_field:
            raise cli.UserError("--text_field is empty: name the JSON field that holds the text")
        self.input_format, self.text_document = input_format, text_document
        self.text_field, self.keep_title = text_field, keep_title
        self.stats = ReadStats()

    def file_format(self, path):
        """The format of `path`: "text", "wikiextractor" (<doc> blocks), "wikiextractor-json" or "jsonl"."""
        if self.input_format == "text":
            return "text"
        first = None
        for offset, raw in filesystem.read_lines(path):
            first = decode_line(raw, path, offset).strip()
            if first:
                break
        if self.input_format == "jsonl":
            return "jsonl"
        if self.input_format == "wikiextractor":
            if first and first.startswith("{"):
                return "wikiextractor-json"
            if first is None or first.startswith("<doc"):
                return "wikiextractor"
            raise cli.UserError(f"{path}: not WikiExtractor output (--input_format=wikiextractor): its first line is "
                                f"neither <doc ...> nor a JSON object: {first[:80]!r}")
        if first and first.startswith("<doc"):
            return "wikiextractor"
        if first and first.startswith("{"):
            try:
                fields = json.loads(first)
            except ValueError:
                return "jsonl"  # the error, with its line, comes as the file is read
            if isinstance(fields, dict) and {"url", "title", "text"} <= set(fields):
                return "wikiextractor-json"
            return "jsonl"
        return "text"

    def documents(self, path, start=0, end=None, file_format=None):
        file_format = file_format or self.file_format(path)
        lines = _Lines(path, start)
        if file_format == "text":
            return self._text(lines, start, end)
        if file_format == "wikiextractor":
            return self._wikiextractor(lines, start, end)
        return self._json(lines, end, "text" if file_format == "wikiextractor-json" else self.text_field,
                          file_format == "wikiextractor-json")

    # text ------------------------------------------------------------------------------------------------
    def _text_boundary(self, lines):
        """Whether the next line is where a range of paragraph or heading documents begins or ends (see
        documents)."""
        if not _blank(lines.peek()):
            return False
        if self.text_document == "paragraph":
            return True
        following = lines.peek(1)
        return following is not None and _is_heading(following[1]) and (lines.peek(2) is None or
                                                                          _blank(lines.peek(2)))

    def _text(self, lines, start, end):
        mode = self.text_document
        if start > 0:
            if mode == "file":
                return
            while lines.peek() is not None and not self._text_boundary(lines):
                lines.next()
            boundary = lines.next()
            if boundary is None or (end is not None and boundary[0] >= end):
                return  # no document begins in this range
        if mode == "file":
            end = None
        paragraph, size, first_offset = [], 0, None
        opened = False
        while True:
            item = lines.peek()
            if item is not None and end is not None and item[0] >= end and self._text_boundary(lines):
                item = None
            if item is not None:
                lines.next()
                line = item[1].strip()
                if line:
                    if not paragraph:
                        first_offset = item[0]
                    paragraph.append(line)
                    size += len(line) + 1
                    if size <= MAX_PARAGRAPH_CHARS:
                        continue
                    self.stats.cut_paragraphs += 1
            if paragraph:
                if mode == "heading" and len(paragraph) == 1 and _is_heading(paragraph[0]) and (
                        item is None or not line):
                    self.stats.headings += 1
                    opened = False
                else:
                    if not opened or mode == "paragraph":
                        yield Document(first_offset)
                        opened = True
                    yield " ".join(paragraph)
                paragraph, size = [], 0
            if item is None:
                return

    # WikiExtractor's <doc> blocks ------------------------------------------------------------------------
    _DOC = re.compile(r"<doc(?:\s.*)?>$")
    _TITLE = re.compile(r'\btitle="([^"]*)"')

    def _wikiextractor(self, lines, start, end):
        synced = start == 0
        while True:
            item = lines.peek()
            if item is None:
                return
            offset, text = item
            if not text.startswith("<doc"):
                lines.next()
                if synced and text.strip():
                    raise lines.error(offset, "text outside a <doc ...> ... </doc> block: expected WikiExtractor "
                                              "output (or give --input_format)")
                continue
            if end is not None and offset >= end:
                return
            synced = True
            lines.next()
            header = text.strip()
            if not self._DOC.match(header):
                raise lines.error(offset, f"a malformed <doc> line: {header[:80]!r}")
            title = self._TITLE.search(header)
            title = html.unescape(title.group(1)).strip() if title else None
            yield Document(offset)
            first = True
            while True:
                item = lines.next()
                if item is None:
                    raise lines.error(offset, "this <doc> has no </doc> (the file ends first)")
                line = item[1].strip()
                if line.startswith("</doc>"):
                    break
                if line.startswith("<doc"):
                    raise lines.error(item[0], f"a <doc> inside the <doc> opened at line "
                                               f"{filesystem.line_number(lines.path, offset)} (its </doc> is missing)")
                if not line:
                    continue
                line = html.unescape(line)
                if first and title is not None and line == title and not self.keep_title:
                    self.stats.titles += 1
                else:
                    yield line
                first = False

    # JSON lines ------------------------------------------------------------------------------------------
    def _json(self, lines, end, field, wikiextractor):
        while True:
            item = lines.next()
            if item is None or (end is not None and item[0] >= end):
                return
            offset, text = item
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except ValueError as err:
                raise lines.error(offset, f"not valid JSON ({err.msg} at column {err.colno}): expected one JSON "
                                          "object per line (plain text? give --input_format=text)") from None
            if not isinstance(record, dict):
                raise lines.error(offset, f"expected a JSON object, got {type(record).__name__}")
            if field not in record:
                raise lines.error(offset, f"the object has no field {field!r} (its fields: "
                                          f"{', '.join(sorted(record)) or 'none'}); name the text's field with "
                                          "--text_field")
            value = record[field]
            if not isinstance(value, str):
                raise lines.error(offset, f"field {field!r} is {type(value).__name__}, expected a string of text")
            paragraphs = [line.strip() for line in value.split("\n") if line.strip()]
            if wikiextractor:
                paragraphs = [html.unescape(p) for p in paragraphs]
                title = record.get("title")
                title = html.unescape(title).strip() if isinstance(title, str) else None
                has_title = bool(paragraphs) and title is not None and paragraphs[0] == title
                if has_title and not self.keep_title:
                    paragraphs = paragraphs[1:]
                    self.stats.titles += 1
                elif title and not has_title and self.keep_title:
                    paragraphs.insert(0, title)  # WikiExtractor's --json keeps the title in its own field
            yield Document(offset)
            yield from paragraphs


# ---------------------------------------------------------------------------------------------------------
# Writing.

class WriteStats:
    """Counts of a CorpusWriter: documents and sentences written, and what was dropped and why."""

    FIELDS = ("documents", "sentences", "words", "empty_documents", "short_documents", "short_sentences")

    def __init__(self):
        for name in self.FIELDS:
            setattr(self, name, 0)

    def add(self, other):
        for name in self.FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self):
        return {name: getattr(self, name) for name in self.FIELDS}


class CorpusWriter:
    """Writes documents as create_pretraining_data.py reads them: one sentence per line, a blank line after each
    document. Sentences with fewer than `min_words` words (whitespace-separated) and documents with fewer than
    `min_sentences` sentences are dropped (counted); a document without sentences always is."""

    def __init__(self, out, segmenter, min_words=0, min_sentences=1):
        if min_words < 0 or min_sentences < 1:
            raise cli.UserError(f"--min_words_per_sentence={min_words} / --min_sentences_per_document="
                                f"{min_sentences}: expected >= 0 and >= 1")
        self.out, self.segmenter = out, segmenter
        self.min_words, self.min_sentences = min_words, min_sentences
        self.stats = WriteStats()
        self._pending, self._streaming, self._open = [], False, False

    def start_document(self):
        self.end_document()
        self._open = True

    def add_paragraph(self, text):
        if not self._open:
            self.start_document()
        for sentence in self.segmenter.split(text):
            words = len(sentence.split())
            if words < self.min_words:
                self.stats.short_sentences += 1
                continue
            self.stats.sentences += 1
            self.stats.words += words
            if self._streaming:
                self.out.write(sentence + "\n")
                continue
            self._pending.append(sentence)
            if len(self._pending) >= self.min_sentences:
                self.out.write("".join(s + "\n" for s in self._pending))
                self._pending, self._streaming = [], True

    def end_document(self):
        if not self._open:
            return
        if self._streaming:
            self.out.write("\n")
            self.stats.documents += 1
        elif self._pending:
            self.stats.short_documents += 1
            self.stats.sentences -= len(self._pending)
            self.stats.words -= sum(len(s.split()) for s in self._pending)
        else:
            self.stats.empty_documents += 1
        self._pending, self._streaming, self._open = [], False, False

    def write_events(self, events):
        """Writes a reader's events (Document markers and paragraphs)."""
        for event in events:
            if isinstance(event, Document):
                self.start_document()
            else:
                self.add_paragraph(event)
        self.end_document()
