"""Raw text as documents of sentences, the input create_pretraining_data.py reads: the sentence segmenter, the
readers of the formats text comes in, and the writer of one sentence per line with blank lines between documents.
prepare_corpus.py runs them over files; main_job.py segments its docstrings with the same segmenter.

Segmentation: sentencex (Wikimedia's rule-based segmenter for ~300 languages, chosen by measurement:
benchmarks/SEGMENTATION.md) splits each paragraph, then a layer of ours moves, removes or adds cuts between its
pieces where the library has a habit our gold sets caught (each rule is commented where it is written and tested in
tests/test_corpus_text.py):
  * joined: a piece that is only a list marker ("1.", "b)", "•") and the item it numbers; a piece that begins with
    a comma or a semicolon, or ends with one; a word cut at its inner full stop ("U.|K.", "１２．|５"); Latin text
    inside Chinese or Japanese that sentencex's English rules keep whole ("Dr. | Smith提出"); a quotation's 。！？
    followed by a particle that cannot begin a sentence (「行きます。」と言った, “为什么？”的时候); a title's ？
    before more text (《为什么要读书？》这本书); a piece beginning with a lower-case letter or a digit after an
    abbreviation ("approx. three", "vol. 12"), after a quotation's own terminator or after ? ! ('"Why?" he
    asked'). After an ordinary word and a full stop a lower-case word begins a sentence ("... home. then I slept",
    "... sales. iPhone sales fell").
  * moved: a list marker left at the end of the item before ("1. Go left 2. | Go right"); closing quotes that
    begin a piece ("『没关系。| 』然后").
  * added: list items run together ("1) Check the oil 2) Check the tyres"); a sentence closed inside brackets ("(It
    reopens in May.) Tickets"); ?! runs and "…" before a capital ("Really?! I had no idea."); a Chinese quotation
    closed after an ellipsis (“我不知道……”然后); a sentence ending in a single lower-case letter ("the letter x.
    Then").
  * classes of words before a full stop, each deciding whether a sentence ends there (sentencex knows some words
    of a class and not others): a label before a number or a single capital goes on ("Eq. (7)", "Fig. 4", "App.
    B"), as does a capitalized abbreviation or a unit before a lower-case word ("Mass. this year", "a 9-in. pan"),
    a label and its number alone ("Step 1. Unplug it.") and the hours before a time zone or a day ("4:45 p.m.
    Eastern"); a company's suffix or a generation before a capitalized word ends one ("Sons Ltd. Nobody"), as do a
    state's abbreviation, a single capital or a roman numeral before a word that begins sentences ("Portland, Ore.
    That's", "group C. The", "World War I. A").
  * lists: after a colon, the first marker or bullet and each next one of its sequence begin items ("parts: a) a
    written test b) an oral interview", "步骤：1．打开电源。2．…", "Pros: - fast - cheap Cons: - heavy"), unless a
    comma, a semicolon, "and" or "or" runs them into the sentence ("steps: (1) stop it and (2) restart it",
    "然而：(a)…；(b)…"); bullets ("•", "⁃9."), capitals' and roman numerals' markers ("A. Scope B. Terms", "I. Aims
    II. Methods") and Chinese numerals ("一、背景二、方法") run together.
  * quotations: one that opens its sentence and ends in its own ! or ? goes on before a name and a verb of speaking
    ('"Wait!" Nora shouted'); in Chinese and Japanese, also after its own 。, before a short clause saying who spoke
    (“快跑！”他大喊一声。); a Latin quotation's own full stop before Chinese text does not end the sentence
    (他说了一句“Thank you.”就走了。). Text without capitals: ? and ! end a sentence before any word. A dash
    right after a full stop goes on ("Mon.–Fri.").
Chinese and Japanese full stops (。！？) end sentences in every language (sentencex splits them whatever the
language code; tests keep that checked). A sentence's whitespace runs (newlines included) become single spaces.

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
import functools
import html
import itertools
import operator
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
#
# sentencex gives a paragraph's pieces; the layer below moves, removes or adds cuts between them, each rule for one
# habit of the library found on the tricky gold sets of benchmarks/ (segmentation_tricky*_en.txt, *_zh.txt; the
# rules. tests: tests/test_corpus_text.py). A cut is an offset into the paragraph where a sentence begins. The
# layer's cost is kept to a few passes over a paragraph: the patterns begin with a literal character or run only
# where their characters are (benchmarks/SEGMENTATION.md has its rate).

# Bullets that mark nothing but a list item ("•", "▪", "⁃"), and those that are also dashes in prose ("-", "–", "*").
_BULLETS = "•◦▪‣∙⁃●○■□►➢✓✔"
_DASH_BULLETS = "-–*"
# A list marker: "1.", "2)", "3.)", "(4)", "b.", "c)", "iv.", "(ii)", "1．" (a full-width point: Chinese and
# Japanese lists); bullets, alone or before a marker ("⁃9.").
_MARKER = r"[(\[]?(?:\d{1,3}|[A-Za-z]|[ivxlcdmIVXLCDM]{1,6})(?:\.\)|[.．)\]])"
_LIST_MARKER = re.compile(r"^[" + _BULLETS + r"]?" + _MARKER + r"$|^[" + _BULLETS + r"·*-]$")
# A marker that begins a list item: numbers, lower-case letters and roman numerals (a space after them, or nothing
# after a full-width point: "1．收集数据"); capitals in brackets ("A)", "(B)"), and "A." or a capital roman numeral
# but V and X before a capitalized word ("A. Background B. Proposal", "II. Methods"; "A. B. Smith" begins with
# initials, "B. Smith" and "V. Smith" are one).
_LEADING_MARKER = re.compile(r"([(\[（]?)(\d{1,3}|[a-z]|[ivxlcdm]{1,6})(\.\)|[.．)\]）])(?=\s|(?<=[．）])|[\u3040-\u30ff"
                             r"\u3400-\u9fff])|"
                             r"([(\[]?)([A-Z]|[IVXLCDM]{1,6})(\.\)|[)\]])(?=\s)|"
                             r"()(A|I{1,3}|IV|VI{1,3}|IX|XI{1,3})(\.)(?= [A-Z][a-z])")
# Opening quotes and brackets before a piece's first letter; closing ones after a sentence's last terminator.
_OPENERS = "\"'“‘«‹([{¿¡"
_CLOSERS = "\"'”’»›)]}」』）】》"
# Closing quotes and brackets that never open anything (not "»", which opens German quotations, nor "’", an
# apostrophe too).
_CLOSING_ONLY = "”)]}」』）】》〕〉"
# Chinese, Japanese and Korean script and their punctuation (not the full-width letters and digits).
_CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40"
                  r"\uff5b-\uff65]")
# English abbreviations after which a lower-case word or a number goes on with the sentence ("approx. three",
# "vol. 12", "incl. tax"): sentencex (1.0.32) splits after those it does not list; its list has titles, states and
# many more (the months and a few others are repeated here). Only consulted for a piece that sentencex begins with a
# lower-case letter or a digit; words that are also common English words ("max", "lab", "long") are left out.
_ABBREVIATIONS = frozenset("""
    abbr abt acad admin amt anon appt approx appx assoc attn atty avg bldgs cca ch chap chaps chg chs cmte contd corr
    cpt ctr dept depts deriv dz eds edn encl eqn eqns eqs equiv esp excl exh figs govt hrs hwy illus incl incr intl
    kgs lbs mfr mgmt mgr mgt misc mkt mln mos mph mths natl orig oz pct perh pkg pls pp pt pts publ qtr qty recd
    refs repr resp rpt secs sect sects seq sqq suppl tbl tbsp tsp usu viz vol vols vs wkly wks yds yr yrs
    jan feb apr jun jul aug sept oct nov dec mon tue tues wed thu thur thurs fri &c
""".split())
# A word made of letters and inner full stops ("a.m", "U.S", "e.g", "Ph.D"): an abbreviation, never a sentence end
# before a lower-case word.
_DOTTED = re.compile(r"^(?:[A-Za-z]{1,3}\.)+[A-Za-z]{1,3}$")
# Where the library missed a sentence end (_add_cuts):
# A run of two or more ! and ? before English "I" ("Really?! I had no idea."): sentencex reads the run as an ellipsis,
# after which it continues before "I".
_EMPHATIC_I = re.compile(r"[!?][!?]+ (?=I[ '’])")
# A sentence closed inside brackets ("(It reopens in May.) Tickets ...", "（这是后来才知道的。）当时..."): sentencex
# does not split inside brackets, and a bracket is not a terminator. One pattern per bracket, each beginning with
# it (a pattern that begins with one character is searched for fast).
_CLOSED_BRACKET = {b: re.compile(re.escape(b) + r"(?<=[.!?。！？]" + re.escape(b) + r")[)\]）】]*"
                                 r"(?: (?=[\"“‘']?[A-Z])|(?=[\u3040-\u30ff\u3400-\u9fff]))") for b in ")]）】"}
# An ellipsis written as one character before a capitalized word ("She waited… Nobody came."): sentencex cuts
# after "..." there but not after "…" (and, as after "...", not before English "I").
_ELLIPSIS_CAPITAL = re.compile(r"… (?=[\"“‘']?[A-Z])(?!I[ '’])")
# A Chinese or Japanese quotation that ends in an ellipsis, before more Chinese or Japanese text (“我不知道……”然后
# ...): a sentence end, as sentencex cuts after “...。” and “...？” (it does not after an ellipsis).
_ELLIPSIS_QUOTE = re.compile(r"…[”」』]+(?=[\u3040-\u30ff\u3400-\u9fff])(?![とっ的吗呢吧])")
# A single lower-case letter ending a sentence ("the letter x. Then", "option a. The"): sentencex takes every single
# letter for an initial ("v." is the one lower-case single-letter abbreviation before a capital: "Roe v. Wade").
# (The pattern begins with ". ", the lookbehind after it: searched for fast.)
_LOWER_LETTER_END = re.compile(r"\. (?<=[ (][a-uw-z]\. )(?=[\"“]?[A-Z][a-z])")
# The first characters of list markers (_LEADING_MARKER) but capitals ("A)", "IV)"), looked for by their ")".
_MARKER_FIRST = frozenset("0123456789０１２３４５６７８９([abcdefghijklmnopqrstuvwxyz")
# The first two characters of the capitals' markers without a bracket ("A.", "II.", "IV."; _LEADING_MARKER).
_CAPITAL_MARKER_STARTS = frozenset(("A.", "I.", "II", "IV", "VI", "IX", "XI"))
_CAPITAL_MARKER_FIRST = frozenset("AIVX")
# Classes of words before a full stop, each of which says whether a sentence ends there; sentencex knows some of the
# words and not others, and decides some of the classes otherwise.
# - Labels that go before a number or a letter ("Ch. 5", "Eq. (7)", "Fig. 4", "No. 12", "Jan. 15", "App. B"): a
#   capitalized word of one or two letters, or a label's or a month's abbreviation, and a full stop before a digit
#   (or a bracket and a digit) or a single capital go on with their sentence ("... in World War Two. 1948 saw ..."
#   ends one).
_NUMBER_LABEL = re.compile(r"(?<![A-Za-z])(?:[A-Z][A-Za-z]?|Abb|Alg|Apps?|Arts?|Bd|Chap|Chs|Cols?|Cor|Def|Eqn?s?|Exs|"
                           r"Figs?|Fn|"
                           r"Lem|Nos?|Nr|Paras?|Pts|Prop|Refs?|Sch|Secs?|Sects?|Ser|Suppl|Tab|Tbl|Thm|Vols?|"
                           r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)$")
# - A capitalized abbreviation before a lower-case word ("Cambridge, Mass. this year", "Calif. and"): a capitalized
#   word of at most five letters; a lower-case word after an ordinary word begins a sentence (sloppy text).
_CAPITAL_ABBREVIATION = re.compile(r"[A-Z][a-z]{0,4}$")
# - A label and its number alone ("Step 1. Unplug the device.", "Part II. The return"): not a sentence.
_LABEL = re.compile(r"(?:Act|Appendix|Article|Book|Case|Chapter|Day|Example|Exercise|Figure|Item|Lesson|Level|Method|"
                    r"Note|Option|Part|Phase|Point|Problem|Question|Round|Rule|Scene|Section|Stage|Step|Table|Task|"
                    r"Tip|Unit|Volume|Week) (?:\d{1,3}|[IVX]{1,5})\.")
# - A list's first marker after a colon ("Requirements: 1.", "Steps: (a)").
_FIRST_MARKER = r"[(\[（]?(?:1|１|a|i|A|I)(?:\.\)|[.．)\]）])"
_FIRST_MARKER_AFTER_COLON = re.compile(r"[:：] ?(" + _FIRST_MARKER + r")$")
# - A list after a colon ("The exam has two parts: a) a written test b) an oral interview", "步骤：1．打开电源。2．...",
#   "注意事项：• 请勿…；• 请放…"): its first marker, then the next ones of its sequence (_colon_list_cuts).
_COLON_LIST = re.compile(r"[:：] ?(?=" + _FIRST_MARKER + r"|一、|[" + _BULLETS + r"]|[-–*] )")
# - A label and a colon after the last item of a list begins one more sentence ("- bright screen Cons: - heavy").
_LIST_LABEL = re.compile(r"(?<= )[A-Z][\w-]*(?: [\w-]+){0,2} ?[:：]$")
# - English words after a quotation that say who spoke: a name or a pronoun and a verb of speaking.
_SPEAKER = re.compile(r"(?:[A-Z][a-z]+ ){1,2}(?:said|says|asked|asks|shouted|cried|replied|whispered|called|yelled|"
                      r"added|answered|muttered|screamed|exclaimed|insisted|snapped|begged|pleaded|demanded|"
                      r"wondered|laughed|sighed|told|warned|protested|murmured|repeated|admitted)\b")
# - A clause after a quotation that says who spoke: short, with a verb of speaking.
_SPEECH_ATTRIBUTION = re.compile(r"[^。！？“”「」]{0,10}?[说问道喊答叫笑想言]")
# - The hours' abbreviations before a time zone or a day ("4:45 p.m. Eastern time", "2 a.m. Saturday").
_HOURS = frozenset(("a.m.", "p.m.", "A.M.", "P.M."))
_AFTER_HOURS = re.compile(r"(?:Eastern|Pacific|Central|Mountain|Atlantic|Alaska|Hawaii|Greenwich|[ECMPA][SD]?T|GMT|"
                          r"UTC|BST|CES?T|IST|JST|AES?T|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)\b")
# - A company's suffix, a generation or a title after a name ("Ltd.", "Inc.", "Jr.") before a capitalized word: the
#   end of a sentence ("... Varga & Sons Ltd. Nobody else had bid."; sentencex lists them as titles).
_NAME_SUFFIX_HINT = re.compile(r"\. (?<=(?:nc|td|rp|Co|os|LC|lc|Jr|Sr|sq)\. )")  # (fast: begins with ". ")
_NAME_SUFFIX_END = re.compile(r"(?<![^ (])(?:Inc|Ltd|Corp|Co|Bros|LLC|PLC|Plc|plc|Jr|Sr|Esq)\. (?=[\"“‘']?[A-Z][a-z]+)"
                              r"(?!(?:Inc|Ltd|Corp|Co|Bros|Jr|Sr|Esq)\b)")
# - The abbreviation of a state or a province ending a sentence before a word that begins sentences ("... moved to
#   Portland, Ore. That's where"; sentencex never ends a sentence after those it lists).
_STATE_END = re.compile(r"\. (?:"
                        r"(?<=[ (](?:Ga|Ky|La|Md|Mo|Pa|Va|Vt)\. )|"
                        r"(?<=[ (](?:Ala|Ark|Del|Fla|Ill|Ind|Kan|Neb|Nev|Ore|Tex|Wis|Wyo|Man|Ont|Que)\. )|"
                        r"(?<=[ (](?:Ariz|Colo|Conn|Kans|Mass|Mich|Minn|Miss|Mont|Nebr|Okla|Oreg|Penn|Tenn|Wash|"
                        r"Wisc|Alta|Sask)\. )|"
                        r"(?<=[ (]Calif\. ))"
                        r"(?=[\"“‘']?([A-Z][a-z]*)\b)")
# - A single capital ending a sentence ("in group C. The other teams", "an A. I was proud"; "you and I. Did you
#   see"), which sentencex takes for an initial: after a lower-case word, before a word that begins sentences and is
#   no name (an initial's name: "governor C. Rangarajan said", "Albert I. Jones"); a roman numeral likewise ("World
#   War II. The", "Henry VIII. His son"), unless it numbers a list ("I. Aims II. Methods").
_LETTER_END = re.compile(r"\. (?<=[ IVX][A-Z]\. )(?=[\"“‘']?([A-Z][a-z]*)\b)")
_UNCASED_END = re.compile(r"[!?][!?\"'”’)]* (?=[\"“‘']?\w)")
_LETTER_TOKEN = re.compile(r"[A-Z]|[IVX]{2,5}")
_SENTENCE_STARTERS = frozenset("""
    A An The This That These Those There Then It Its He His Him She Her They Their Them We Our Us You Your I My
    But And Or So Yet If When While After Before As At In On For From With By To Of Since Because Although Though
    However Still Now Today Here What Who Why How Where Which Is Are Was Were Do Does Did Can Could Will Would
    Should Has Have Had No Not Nobody Nothing Everyone Some Many Most All Each Both One
""".split())
# - Chinese numbered lists run together ("一、背景二、方法三、结果"): each next numeral and "、" begins an item.
_CHINESE_NUMERALS = "一二三四五六七八九十"
_CHINESE_ITEM = re.compile(r"([一二三四五六七八九十])、")


class Segmenter:
    """Splits text into sentences (see the module docstring): sentencex with our layer. `language`: an ISO
    639 code (sentencex's rules for it: abbreviations, its full stops; unknown codes fall back to its defaults)."""

    def __init__(self, language="en"):
        import sentencex  # pylint: disable=import-outside-toplevel
        if not isinstance(language, str) or not re.fullmatch(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*", language):
            raise cli.UserError(f"--language={language!r}: expected a language code such as en, de or zh")
        self.language = language
        self._segment = sentencex.segment

    def split(self, text):
        """The sentences of `text` (a paragraph; its line breaks are spaces), whitespace runs made single spaces."""
        if not text.isprintable() or "  " in text or text[:1] == " " or text[-1:] == " ":
            text = " ".join(text.split())  # (isprintable: no whitespace but " ", tested faster than split)
        if not text:
            return []
        pieces = self._segment(self.language, text)
        cuts = [0]  # sentencex's pieces as offsets of their first characters (a space after a piece stays with it)
        if len(pieces) > 1:
            cuts.extend(itertools.accumulate(map(len, pieces[:-1])))
            if " " in operator.itemgetter(*cuts)(text):  # (a piece that begins with a space: rare)
                cuts = sorted({c + 1 if text[c] == " " else c for c in cuts} - {len(text)})
        cased = text != text.lower()
        if len(cuts) > 1:
            cuts = _join(text, cuts, cased)
        bulleted = not text.isascii() and _BULLET.search(text) is not None
        cuts = _add_cuts(text, cuts, cased, bulleted)
        # Pieces that may begin with a list marker: the first characters tested at once (operator.itemgetter), a
        # capital's marker ("A)", "IV)") by a bracket near a piece's start.
        firsts = operator.itemgetter(*cuts)(text)
        may_begin_list = not _MARKER_FIRST.isdisjoint(firsts) or (
            not _CAPITAL_MARKER_FIRST.isdisjoint(firsts) and any(text[c:c + 2] in _CAPITAL_MARKER_STARTS for c in cuts))
        if not may_begin_list and ")" in text:
            may_begin_list = any(")" in text[c:c + 6] for c in cuts)
        if may_begin_list:
            inner = _inline_item_cuts(text, cuts, cuts[1:] + [len(text)])
            if inner:
                cuts = sorted(set(cuts).union(inner))
        if may_begin_list or bulleted:
            cuts = _without_lone_markers(text, cuts)
        ends = cuts[1:]
        ends.append(len(text))
        return [text[a:b].rstrip() for a, b in zip(cuts, ends)]


def _without_lone_markers(text, cuts):
    """`cuts` without the cut after a piece that is only a list marker, left by a rule that cut before the marker
    after sentencex's cut after it ("parts: | I. Origins II. | Expansion")."""
    kept = [cuts[0]]
    for cut in cuts[1:]:
        if cut - kept[-1] > 9 or not _LIST_MARKER.match(text[kept[-1]:cut].rstrip()):
            kept.append(cut)
    return kept


def _join(text, cuts, cased):
    """sentencex's cuts moved or removed, left to right (_continues says when a cut is removed)."""
    out = [cuts[0]]
    ascii_only = text.isascii()
    colons = ":" in text or "：" in text
    for k in range(1, len(cuts)):
        cut, start = cuts[k], out[-1]
        left_end = cut - 1 if text[cut - 1] == " " else cut
        last = text[left_end - 1]
        # A dash right after a full stop ("Mon.–Fri."); a quotation that opens its sentence, its own ? or ! before
        # who spoke ('"Wait!" Nora shouted'; not 'He asked, "Why not?" Nobody answered.'): the sentence goes on.
        if (left_end == cut and text[cut] in "–—-") or (
                last in "\"”" and text[left_end - 2] in "!?" and text[start] in "\"“" and _SPEAKER.match(text, cut)):
            continue
        # A label and its number alone ("Step 1."); the hours before a time zone or a day ("4:45 p.m. Eastern"); a
        # label before a number or a single capital ("App. B").
        if last == "." and (
                (left_end - start <= 16 and _LABEL.fullmatch(text, start, left_end)) or
                (text[left_end - 2] in "mM" and text[left_end - 4:left_end] in _HOURS and
                 _AFTER_HOURS.match(text, cut)) or
                (text[cut].isupper() and not text[cut + 1:cut + 2].isalpha() and
                 _NUMBER_LABEL.search(text, max(start, left_end - 7), left_end - 1))):
            continue
        # A list's first marker after a colon, left at the end of the piece ("Requirements: 1. | Python 3.9"): the
        # cut moves before it.
        if colons and last in ".)．）" and (text.find(":", left_end - 7, left_end) >= 0 or
                                text.find("：", left_end - 7, left_end) >= 0):
            colon_marker = _FIRST_MARKER_AFTER_COLON.search(text, max(start, left_end - 7), left_end)
            if colon_marker:
                out.append(colon_marker.start(1))
                continue
        # The common case, a capital after a space and a sentence of more than a list marker in Latin text, that
        # does not begin with a marker: the cut stays.
        plain = ascii_only and left_end != cut and left_end - start > 8 and text[cut].isupper()
        if plain and text[start] not in _MARKER_FIRST and ")" not in text[start:start + 6] and \
                text[start:start + 2] not in _CAPITAL_MARKER_STARTS:
            out.append(cut)
            continue
        # A numbered item's marker left at the end of the item before ("1. Go left 2. | Go right", "1. 打开电源。2. |
        # 按下按钮。"): the cut moves before it.
        # (After a bullet, the bullet and the marker: "⁃9. The first item ⁃10. | The second".)
        bullet = text[start] in _BULLETS
        marker = _LEADING_MARKER.match(text, start + bullet, left_end)
        if marker:
            moved = [left_end - len(m) - bullet for count in range(1, 6) for m in _next_markers(marker, count)
                     if text.endswith(m, start, left_end) and
                     left_end - len(m) > marker.end() and text[left_end - len(m) - 1 - bullet] in " 。！？" and
                     (not bullet or text[left_end - len(m) - 1] == text[start])]
            if moved:
                out.append(moved[0])
                continue
        # A piece that begins with a closing quote or bracket ("『没关系。| 』然后"; sentencex pairs only some
        # quotes): the closers end the sentence before, the cut moves after them.
        if text[cut] in _CLOSING_ONLY:
            after = cut
            while after < len(text) and text[after] in _CLOSING_ONLY:
                after += 1
            after += text[after:after + 1] == " "
            next_cut = cuts[k + 1] if k + 1 < len(cuts) else len(text)
            if after < next_cut:
                out.append(after)
            continue
        if plain or not _continues(text, (start, left_end), (cut, cuts[k + 1] if k + 1 < len(cuts) else len(text)),
                                   cased, ascii_only):
            out.append(cut)
    return out


def _add_cuts(text, cuts, cased, bulleted):
    """Cuts added where a sentence ends that sentencex does not end (the patterns run only on paragraphs that hold
    their characters: each pass over a paragraph costs; `bulleted`: the paragraph holds a bullet, _BULLET)."""
    added = []
    if cased and ("! I" in text or "? I" in text):
        added.extend(m.end() for m in _EMPHATIC_I.finditer(text) if _outside_brackets(text, cuts, m.start()))
    if cased and "… " in text:
        added.extend(m.end() for m in _ELLIPSIS_CAPITAL.finditer(text) if _outside_brackets(text, cuts, m.start()))
    if "…”" in text or "…」" in text or "…』" in text:
        added.extend(m.end() for m in _ELLIPSIS_QUOTE.finditer(text))
    for bracket, pattern in _CLOSED_BRACKET.items():
        if bracket in text:
            added.extend(m.end() for m in pattern.finditer(text)
                         if (cased or _CJK.match(text, m.end())) and _bracketed_sentence(text, m.start()) and
                         not _abbreviation_before(text, m.start() - 1))
    if cased:
        added.extend(m.end() for m in _LOWER_LETTER_END.finditer(text)
                     if m.start() - 1 not in cuts and _outside_brackets(text, cuts, m.start()) and
                     not _in_lettered_list(text, cuts, m.start()))
    if cased and ". " in text:
        if _NAME_SUFFIX_HINT.search(text):
            added.extend(m.end() for m in _NAME_SUFFIX_END.finditer(text) if _outside_brackets(text, cuts, m.start()))
        if _LETTER_END.search(text):
            added.extend(_letter_ends(text, cuts))
        added.extend(m.end() for m in _STATE_END.finditer(text)
                     if m.group(1) in _SENTENCE_STARTERS and _outside_brackets(text, cuts, m.start()))
    elif not cased and ("! " in text or "? " in text):
        # Text without capitals: ? and ! before a word end a sentence ("lol that's hilarious!! did u see it?").
        added.extend(m.end() for m in _UNCASED_END.finditer(text) if _outside_brackets(text, cuts, m.start()))
    if bulleted or text[:2] in ("- ", "– ", "* "):
        added.extend(_bullet_cuts(text))
    if "一、" in text and "二、" in text:
        added.extend(_chinese_item_cuts(text, cuts))
    if (": " in text or "：" in text) and _COLON_LIST.search(text):
        added.extend(_colon_list_cuts(text))
    if not added:
        return cuts
    return sorted(set(cuts).union(a for a in added if 0 < a < len(text)))


_ROMAN_BEFORE = {"II": "I", "III": "II", "IV": "III", "V": "IV", "VI": "V", "VII": "VI", "VIII": "VII", "IX": "VIII",
                 "X": "IX", "XI": "X", "XII": "XI"}


def _letter_ends(text, cuts):
    """Sentence ends after a single capital or a roman numeral (_LETTER_END), not in a list of them ("I. Aims II.
    Methods")."""
    for m in _LETTER_END.finditer(text):
        if m.group(1) not in _SENTENCE_STARTERS:
            continue
        at = text.rfind(" ", 0, m.start()) + 1  # the letter or the numeral
        token = text[at:m.start()]
        if not at or not _LETTER_TOKEN.fullmatch(token):
            continue
        if len(token) > 1 or token == "I":
            previous = _ROMAN_BEFORE.get(token)
            if (" II. " in text if token == "I" else previous is not None and (
                    text.startswith(previous + ". ") or text.find(" " + previous + ". ", 0, at) >= 0)):
                continue
        elif not text[text.rfind(" ", 0, at - 1) + 1:at - 1].isalpha() or not text[at - 2].islower():
            continue
        if m.end() not in cuts and _outside_brackets(text, cuts, at):
            yield m.end()


def _bullet_cuts(text):
    """List items run together after bullets: before each bullet that follows a space ("• Red • Green", "⁃9. The
    first item ⁃10. The second"); before each dash or asterisk between spaces when the paragraph begins with one
    and holds no sentence end ("* Fix the bug * Update the docs"; not "- Brokers reported the sales. Iron Gippsland
    - (built 1989) ..."). (Dashes after a colon: _colon_list_cuts.)"""
    cuts = [m.start() for m in _BULLET.finditer(text) if text[m.start() - 1:m.start()] == " "]
    if text[:2] in ("- ", "– ", "* ") and not _SENTENCE_END_INSIDE.search(text):
        cuts.extend(m.start() + 1 for m in re.finditer(" " + re.escape(text[0]) + " ", text))
    return cuts


_BULLET = re.compile(r"[" + _BULLETS + r"](?= ?\S)")
_SENTENCE_END_INSIDE = re.compile(r"[.!?][\"'”’)]* ")


def _chinese_item_cuts(text, cuts):
    """Chinese numbered items run together ("一、背景二、方法"): from a "一、" that begins a piece (after a colon:
    _colon_list_cuts), a cut before each next numeral of the sequence with text between."""
    first = text.find("一、")
    return _chinese_items(text, first) if first in cuts else []


def _chinese_items(text, first):
    """The offsets of the numerals that follow the "一、" at `first` in their sequence, each after some text."""
    found, expected, after = [], 2, first + 2
    for m in _CHINESE_ITEM.finditer(text, first + 2):
        value = _CHINESE_NUMERALS.index(m.group(1)) + 1
        if value == expected and m.start() > after:
            found.append(m.start())
            expected, after = expected + 1, m.end()
    return found


def _colon_list_cuts(text):
    """Lists after a colon (_COLON_LIST): a cut before the first marker and before each next one of its sequence;
    none for markers run into a sentence ("two steps: (1) stop the server and (2) restart it", _RUN_IN). A label and
    colon after an item of a list found before begins a sentence too ("Pros: - fast - cheap Cons: - heavy")."""
    found, listed = [], False
    for m in _COLON_LIST.finditer(text):
        if text[m.start()] == ":" and text[m.start() + 1:m.start() + 2] != " ":
            continue
        items = _list_items(text, m.end())
        if not items:
            continue
        if listed:
            label = _LIST_LABEL.search(text, max(0, m.start() - 40), m.start() + 1)
            if label:
                found.append(label.start())
        found.append(m.end())
        found.extend(items)
        listed = True
    return found


_ITEM_BEFORE = " ；;。，、！？"
# Items that a semicolon or a comma ends are run into their sentence ("然而：(a)这将比双向模型成本增加一倍；(b)这也不符合
# 直觉"; "The steps are: 1) wash, 2) dry, 3) fold.").
_RUN_IN = "；;，,"


def _list_items(text, at):
    """The offsets of the items after the first one of a list whose first marker or bullet is at `at`."""
    bullet = text[at]
    if bullet in _BULLETS or bullet in _DASH_BULLETS:
        items, k = [], text.find(bullet, at + 1)
        while k >= 0:
            if text[k - 1] in _ITEM_BEFORE and (bullet in _BULLETS or text[k + 1:k + 2] == " "):
                items.append(k)
            k = text.find(bullet, k + 1)
        return items
    if text.startswith("一、", at):
        items = _chinese_items(text, at)
        return [] if any(text[:k].rstrip()[-1:] in _RUN_IN for k in items) else items
    marker = _LEADING_MARKER.match(text, at)
    if not marker:
        return []
    items = []
    for k in _following_markers(marker, marker.end(), functools.partial(_item_marker, text)):
        if text[:k].rstrip().endswith((" and", " or", "和", "或", "及", *_RUN_IN)):
            return []
        items.append(k)
    return items


def _item_marker(text, marker, position):
    """The offset of the first `marker` from `position` that begins a list item (after a space or a punctuation
    mark, before a space or Chinese or Japanese text); -1 if none."""
    k = text.find(marker, position)
    while k >= 0:
        after = text[k + len(marker):k + len(marker) + 1]
        if text[k - 1] in _ITEM_BEFORE and (after == " " or marker[-1] in "．）" or _CJK.match(after)):
            return k
        k = text.find(marker, k + 1)
    return -1


def _following_markers(marker, position, find):
    """The offsets of the next markers of `marker`'s sequence, in order: each the nearest of the step's markers
    (_next_markers) that find(marker_text, from_offset) gives (-1: none), searched from after the one before."""
    step = 1
    while True:
        found = [k for k in (find(following, position) for following in _next_markers(marker, step)) if k >= 0]
        if not found:
            return
        position = min(found)
        yield position
        position, step = position + 1, step + 1


def _inline_item_cuts(text, cuts, ends):
    """List items run together in one paragraph ("1) Check the oil 2) Check the tyres", "a. Red b. Blue"): a piece
    that begins with a marker is cut before each next marker of the same sequence."""
    added = []
    for start, end in zip(cuts, ends):
        marker = _LEADING_MARKER.match(text, start, end)
        if marker:
            added.extend(start + p for p in _inline_items(text[start:end], marker))
    return added


def _in_lettered_list(text, cuts, position):
    """Whether `position` is in a piece that begins with a lower-case letter's list marker ("a. Red b. Green")."""
    start = max((c for c in cuts if c <= position), default=0)
    marker = _LEADING_MARKER.match(text, start)
    return bool(marker) and marker.group(2) is not None and marker.group(2).isalpha()


def _continues(text, sentence, piece, cased, ascii_only):
    """Whether sentencex's piece text[cut:end] (piece = (cut, end)) goes on with the sentence text[start:left_end]
    before it (sentence = (start, left_end)): the cut between them is removed."""
    (start, left_end), (cut, end) = sentence, piece
    first, last = text[cut], text[left_end - 1]
    # A piece that is only a list marker ("1.", "b)", "•") numbers the item after it.
    if left_end - start <= 8 and _LIST_MARKER.match(text[start:left_end]):
        return True
    # A sentence never begins with a comma or a semicolon (sentencex cuts before "，" after "M.I.T."), nor ends with
    # one (it cuts "(Zhu et al., | 2015)" in a long Chinese paragraph). (Not the ASCII colon: ":param x:" in a
    # docstring begins a field of its own.)
    if first in ",;，、；：" or last in ",;，、；":
        return True
    # A word or number cut at a full stop inside it, without a space: an initialism ("U.|K.", "M.|I.T."), a
    # decimal with a full-width point ("１２．|５").
    if left_end == cut and last in ".．" and first.isalnum() and left_end - start >= 2:
        before = text[left_end - 2]
        if before.isdigit() and first.isdigit():
            return True
        if before.isalpha() and (left_end - start == 2 or not text[left_end - 3].isalpha()):
            return True
    # Latin text inside Chinese or Japanese is judged by sentencex's English rules ("Prof. | Wang的书",
    # "Dr. | Smith提出"): the Latin words on both sides of the cut, segmented as English, are one sentence.
    if not ascii_only and last == "." and first.isascii() and first.isalnum():
        latin_left = _latin_tail(text[start:left_end])
        if latin_left is not None:
            right = text[cut:end]
            cjk = _CJK.search(right)
            window = " ".join((text[left_end - len(latin_left):cut] + (right[:cjk.start()] if cjk else right)).split())
            if len(split_sentences(window, "en")) == 1:
                return True
    # A title's own ？ or ！ never ends the sentence around it (《为什么要读书？》这本书): sentencex treats 《》 as
    # quotes.
    if last in "》〉" and text[left_end - 2] in "？！?!" and _CJK.match(first):
        return True
    # A quotation that opens its sentence and ends in its own 。！？, before a short clause that says who spoke (“快跑！”
    # 他大喊一声。, “我不同意。”他说。; not “我们走吧。”大家都站了起来。); a quotation of Latin text that ends in its
    # own . ! ? before Chinese or Japanese text (他说了一句“Thank you.”就走了。).
    if last in "”」』" and _CJK.match(first) and first not in "“‘「『《〈（【":
        if text[left_end - 2] in ".!?":
            return True
        if text[left_end - 2] in "。！？!?":
            opener = {"”": "“", "」": "「", "』": "『"}[last]
            opened = start + (text[start] == " ")
            if text[opened] == opener and text.find(opener, opened + 1, left_end) < 0 and \
                    _SPEECH_ATTRIBUTION.match(text, cut):
                return True
    # A quotation whose own 。！？ does not end the sentence: the Japanese quotation particle と or って after it
    # (「行きます。」と言った), a Chinese particle that never begins a sentence (“为什么？”的时候, “好吗？”吗).
    if last in "」』”\"" and (first in "と吗呢吧" or text.startswith("って", cut) or
                              (first == "的" and not text.startswith("的确", cut))):
        return True
    # A piece beginning with a lower-case letter or a digit (after opening quotes) goes on with the sentence before
    # when that ends in an abbreviation ("approx. | three", "vol. | 12", "a.m. | on Monday", "p. | 5"), or, in cased
    # text, in a quotation's own ? ! or . ('"Why?" | he asked', '"Fine." | she said') or a ? ! ('Is it? | he
    # asked'). After an ordinary word and a full stop a lower-case word begins a sentence ("... home. | then I
    # slept", "... sales. | iPhone sales fell"): sloppy text, or a name written in lower case.
    if first in _OPENERS:
        first = text[cut:cut + 4].lstrip(_OPENERS)[:1]
    if not (first.islower() or first.isdigit()):
        return False
    # (The word before the full stop: after a space, or a dash or slash joining it to the word before: "Tue.–Sat".)
    word = _LAST_WORD.split(text[start:left_end - 1])[-1].lstrip(_OPENERS) if last == "." else ""
    # A label before a number ("Eq. (7)", "Fig. 4", "Ch. 5"); before a lower-case word, a capitalized word of up to
    # five letters (an abbreviation: "Mass. this year") or a word with a digit (a unit: "a 9-in. pan").
    if word and (_NUMBER_LABEL.match(word) if first.isdigit() else
                 (_CAPITAL_ABBREVIATION.match(word) or (word[0].isdigit() and not word.isdigit())) and
                 text[cut:end].split(" ", 1)[0].lstrip(_OPENERS).islower()):
        return True
    if _LEADING_MARKER.match(text, cut, end):
        return False
    if last == ".":
        return word.lower() in _ABBREVIATIONS or bool(_DOTTED.match(word)) or (len(word) == 1 and word.isalpha())
    if not cased or not first.islower():
        return False
    if last in _CLOSERS:  # a closing quote or bracket after the terminator
        return text[start:left_end].rstrip(_CLOSERS)[-1:] in ".!?…"
    return last in "!?"


_ASCII = "".join(map(chr, range(128)))
_LAST_WORD = re.compile(r"[ –—/]")


def _latin_tail(left):
    """The ASCII text at the end of `left` after a Chinese or Japanese character, when `left` ends in a full stop
    after a letter ("我们采用了Dr." -> "Dr."); else None."""
    if left[-1:] != "." or not left[-2:-1].isalpha():
        return None
    head = left.rstrip(_ASCII)
    if not head or not _CJK.match(head[-1]):
        return None
    return left[len(head):]


_FULL_WIDTH_DIGITS = str.maketrans("0123456789", "０１２３４５６７８９")
_ROMAN = ["i", "ii", "iii", "iv", "v", "vi", "vii", "viii", "ix", "x", "xi", "xii", "xiii", "xiv", "xv", "xvi",
          "xvii", "xviii", "xix", "xx"]


def _next_markers(marker, count=1):
    """The markers that follow a leading marker match in its sequence, `count` steps on (a single letter i, v or x
    may be a letter or a roman numeral: both are returned)."""
    groups = marker.groups()
    opener, label, closer = next(groups[k:k + 3] for k in range(0, len(groups), 3) if groups[k + 1] is not None)
    labels = []
    if label.isdigit():
        number = str(int(label) + count)
        labels.append(number if label.isascii() else number.translate(_FULL_WIDTH_DIGITS))
    else:
        if len(label) == 1 and label.lower() != "z":
            labels.append(chr(ord(label) + count))
        if label.lower() in _ROMAN and _ROMAN.index(label.lower()) + count < len(_ROMAN):
            following = _ROMAN[_ROMAN.index(label.lower()) + count]
            labels.append(following.upper() if label.isupper() else following)
    return {opener + l + closer for l in labels}


def _inline_items(piece, marker):
    """Offsets in `piece` (which begins with `marker`) of the next markers of its sequence, each after a space
    and before a space."""
    def find(following, position):
        at = piece.find(" " + following + " ", position)
        return at + 1 if at >= 0 else -1
    return list(_following_markers(marker, marker.end(), find))


def _outside_brackets(text, cuts, position):
    """Whether `position` is outside the quotes and brackets opened in its piece (counted from the cut before it)."""
    start = 0
    for cut in cuts:
        if cut > position:
            break
        start = cut
    span = text[start:position]
    return (span.count('"') % 2 == 0 and span.count("“") <= span.count("”") and
            span.count("(") <= span.count(")") and span.count("（") <= span.count("）"))


_OPENING_BRACKET = {")": "(", "]": "[", "）": "（", "】": "【"}


def _bracketed_sentence(text, close):
    """Whether the bracket at `close` closes one opened before it around a sentence: words with a space, or Chinese
    or Japanese text (not a list marker: "1.)")."""
    opening = text.rfind(_OPENING_BRACKET[text[close]], 0, close)
    if opening < 0 or text.find(text[close], opening, close) >= 0:
        return False
    content = text[opening + 1:close]
    return " " in content or bool(_CJK.search(content))


def _abbreviation_before(text, period):
    """Whether the full stop at `period` ends an abbreviation ("U.S.", "et al.", "etc.")."""
    if text[period] != ".":
        return False
    word = text[:period].rsplit(" ", 1)[-1].lstrip(_OPENERS)
    return bool(_DOTTED.match(word)) or word.lower() in _ABBREVIATIONS or word in ("al", "etc", "Inc", "Co", "Ltd",
                                                                                   "Jr", "Sr", "Corp")


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
