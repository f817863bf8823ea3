"""Run BERT on SQuAD 1.1 and SQuAD 2.0 (fine-tuning, prediction, SavedModel export).

Follows the original run_squad.py: whitespace tokenization of the context with character-to-word
offsets, WordPiece sub-tokens, answer span improvement, sliding windows of `doc_stride` with the
"max context" rule, a start/end head named cls/squad/output_{weights,bias}, n-best decoding and
get_final_text, and predictions.json / nbest_predictions.json / null_odds.json in the original formats.
Training and prediction run on training.py; when the predict file has answers, the official metrics
are also written to eval_results.json (squad_evaluation, with null_odds.json for 2.0).

  python run_squad.py --vocab_file=vocab.txt --bert_config_file=bert_config.json \
      --init_checkpoint=bert_model.ckpt --output_dir=out --do_train --train_file=train-v1.1.json \
      --do_predict --predict_file=dev-v1.1.json [--version_2_with_negative] [--export_dir=out/export]

The SavedModel (--export_dir) has serving_default (input_ids, input_mask, segment_ids -> start_logits,
end_logits) and serving_text (question, context strings -> the answer, its character span, its score and
null_score_diff, chosen in the graph with this script's n-best rules and flags; plus the windows and their
logits, which decode_text_outputs() turns into the full n-best lists); see serving.SquadServing. Loading it
needs `import tensorflow_text`. --export_onnx=FILE [--onnx_quantize] and --export_tflite=FILE [--tflite_quantize]
write serving_default as an ONNX or LiteRT model, in float32 or int8 (onnx_export.py, litert_export.py).
"""

import cli  # first: quiets TensorFlow's start-up logging
import collections
import dataclasses
import json
import math
import random

import numpy as np
import tensorflow as tf
from absl import logging

import encoder
import filesystem
import model_options
import modeling
import original_model_fn
import packing
import records
import runner
import serving
import squad_evaluation
import tokenization
import training
from model_options import ModelOptions

# Whitespace of the original reader: space, tab, CR, LF and U+202F (narrow no-break space).
_READER_WHITESPACE = frozenset(" \t\r\n\u202f")

# The original's flags that its functions read (read_squad_examples, write_predictions, get_final_text), for code
# written against them: set them here (run_squad.FLAGS.version_2_with_negative = True), or define and parse absl
# flags of these names; this script's own job passes its options explicitly.
FLAGS = cli.OriginalFlags(version_2_with_negative=False, null_score_diff_threshold=0.0, verbose_logging=False)


class SquadDataError(cli.UserError):
    """Bad SQuAD input; the message names the file, the place in it and what was expected."""


class SquadExample:
    """One question with its whitespace-tokenized context.

    For training, start/end_position are word indexes of the answer (-1 when impossible).
    """

    def __init__(self, qas_id, question_text, doc_tokens, orig_answer_text=None,
                 start_position=None, end_position=None, is_impossible=False):
        self.qas_id = qas_id
        self.question_text = question_text
        self.doc_tokens = doc_tokens
        self.orig_answer_text = orig_answer_text
        self.start_position = start_position
        self.end_position = end_position
        self.is_impossible = is_impossible

    def __repr__(self):
        s = "qas_id: %s" % tokenization.printable_text(self.qas_id)
        s += ", question_text: %s" % tokenization.printable_text(self.question_text)
        s += ", doc_tokens: [%s]" % " ".join(self.doc_tokens)
        if self.start_position:
            s += ", start_position: %d" % self.start_position
            s += ", end_position: %d" % self.end_position
            s += ", is_impossible: %r" % self.is_impossible
        return s

    __str__ = __repr__


@dataclasses.dataclass
class InputFeatures:
    """One window of one example, ready for the model."""
    unique_id: int
    example_index: int
    doc_span_index: int
    tokens: list
    token_to_orig_map: dict
    token_is_max_context: dict
    input_ids: list
    input_mask: list
    segment_ids: list
    start_position: int = None
    end_position: int = None
    is_impossible: bool = None


ReadStats = collections.namedtuple(
    "ReadStats", ["questions", "examples", "skipped_answer_mismatch", "skipped_bad_offset",
                  "empty_contexts"])


def _is_reader_whitespace(c):
    return c in _READER_WHITESPACE


def split_context(paragraph_text):
    """Whitespace tokens of a context and, per character, the index of its token."""
    doc_tokens = []
    char_to_word_offset = []
    prev_is_whitespace = True
    for c in paragraph_text:
        if _is_reader_whitespace(c):
            prev_is_whitespace = True
        else:
            if prev_is_whitespace:
                doc_tokens.append(c)
            else:
                doc_tokens[-1] += c
            prev_is_whitespace = False
        char_to_word_offset.append(len(doc_tokens) - 1)
    return doc_tokens, char_to_word_offset


def _field(obj, key, kind, input_file, where):
    if not isinstance(obj, dict) or key not in obj:
        raise SquadDataError("SQuAD file %s: %s has no \"%s\" field" % (input_file, where, key))
    value = obj[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SquadDataError("SQuAD file %s: %s.%s should be a %s, got %s"
                             % (input_file, where, key, names, type(value).__name__))
    return value


def load_squad_json(input_file):
    """The "data" list of a SQuAD JSON file, with clear errors for unreadable files."""
    try:
        with tf.io.gfile.GFile(input_file, "rb") as reader:
            input_json = json.loads(reader.read().decode("utf-8"))
    except (OSError, tf.errors.OpError) as e:
        raise SquadDataError("cannot read SQuAD file %s: %s" % (input_file, e)) from e
    except ValueError as e:
        raise SquadDataError("SQuAD file %s is not valid JSON: %s" % (input_file, e)) from e
    return _field(input_json, "data", list, input_file, "the top-level object")


def read_squad_examples(input_file, is_training, version_2_with_negative=None, train_first_answer=False,
                        return_stats=False):
    """Read a SQuAD json file into a list of SquadExample (the original's rules).

    version_2_with_negative None reads FLAGS.version_2_with_negative, as the original. For training, answers
    whose text cannot be recovered from the context at the given offset are logged and skipped, as the original
    does; the count is logged at the end. `train_first_answer` lets training use the first of several answers (the
    original requires exactly one). return_stats: (examples, ReadStats).
    """
    if version_2_with_negative is None:
        version_2_with_negative = FLAGS.version_2_with_negative
    reader = _SquadReader(input_file, is_training, version_2_with_negative, train_first_answer)
    examples = []
    for a_index, entry in enumerate(load_squad_json(input_file)):
        paragraphs = reader.field(entry, "paragraphs", list, "data[%d]" % a_index)
        for p_index, paragraph in enumerate(paragraphs):
            examples.extend(reader.paragraph_examples(paragraph, "data[%d].paragraphs[%d]" % (a_index, p_index)))
    stats = reader.log(len(examples))
    if return_stats:
        return examples, stats
    return examples


class _SquadReader:
    """read_squad_examples of one file: its settings, and the counts of what it kept and skipped."""

    def __init__(self, input_file, is_training, version_2_with_negative, train_first_answer):
        self.input_file = input_file
        self.is_training = is_training
        self.version_2_with_negative = version_2_with_negative
        self.train_first_answer = train_first_answer
        self.questions = self.skipped_mismatch = self.skipped_offset = self.empty_contexts = 0
        self.first_of_several = 0

    def field(self, obj, key, kind, where):
        return _field(obj, key, kind, self.input_file, where)

    def log(self, num_examples):
        """Logs what was read and skipped; returns the ReadStats."""
        input_file = self.input_file
        if self.skipped_mismatch or self.skipped_offset or self.empty_contexts:
            logging.warning("SQuAD file %s: %d questions read, %d examples kept; skipped %d whose "
                            "answer text does not match the context, %d with an answer offset outside "
                            "the context; %d empty contexts", input_file, self.questions, num_examples,
                            self.skipped_mismatch, self.skipped_offset, self.empty_contexts)
        else:
            logging.info("SQuAD file %s: %d questions, %d examples", input_file, self.questions, num_examples)
        if self.first_of_several:
            logging.info("SQuAD file %s: %d training questions have several answers; the first one "
                         "is used (--train_first_answer)", input_file, self.first_of_several)
        return ReadStats(self.questions, num_examples, self.skipped_mismatch, self.skipped_offset,
                         self.empty_contexts)

    def paragraph_examples(self, paragraph, where_p):
        paragraph_text = self.field(paragraph, "context", str, where_p)
        qas = self.field(paragraph, "qas", list, where_p)
        doc_tokens, char_to_word_offset = split_context(paragraph_text)
        if not doc_tokens:
            self.empty_contexts += 1
            logging.warning("SQuAD file %s: %s has an empty context; its %d questions get no "
                            "features (answerable training questions are skipped, others "
                            "get the original's empty prediction)", self.input_file, where_p, len(qas))
        examples = []
        for q_index, qa in enumerate(qas):
            where = "%s.qas[%d]" % (where_p, q_index)
            qas_id = self.field(qa, "id", (str, int), where)
            question_text = self.field(qa, "question", str, where)
            self.questions += 1
            answer = (None, None, None, False)
            if self.is_training:
                answer = self.training_answer(qa, where, doc_tokens, char_to_word_offset)
                if answer is None:
                    continue
            orig_answer_text, start_position, end_position, is_impossible = answer
            examples.append(SquadExample(
                qas_id=qas_id, question_text=question_text, doc_tokens=doc_tokens,
                orig_answer_text=orig_answer_text, start_position=start_position,
                end_position=end_position, is_impossible=is_impossible))
        return examples

    def training_answer(self, qa, where, doc_tokens, char_to_word_offset):
        """(answer text, start word, end word, is_impossible) of a training question, or None to skip it."""
        input_file, qas_id = self.input_file, qa["id"]
        is_impossible = False
        if self.version_2_with_negative:
            is_impossible = self.field(qa, "is_impossible", bool, where)
        answers = self.field(qa, "answers", list, where)
        if len(answers) != 1 and not is_impossible:
            if not (self.train_first_answer and answers):
                raise SquadDataError(
                    "SQuAD file %s: %s (id %s) has %d answers; for training, each "
                    "question should have exactly 1 answer (set "
                    "--train_first_answer to train on the first one)"
                    % (input_file, where, qas_id, len(answers)))
            self.first_of_several += 1
        if is_impossible:
            return "", -1, -1, True
        if not doc_tokens:
            self.skipped_offset += 1
            return None
        orig_answer_text = self.field(answers[0], "text", str, where + ".answers[0]")
        answer_offset = self.field(answers[0], "answer_start", int, where + ".answers[0]")
        answer_end = answer_offset + len(orig_answer_text) - 1
        if answer_offset < 0 or not orig_answer_text or answer_end >= len(char_to_word_offset):
            logging.warning("SQuAD file %s: %s (id %s): answer_start %d with answer length %d lies outside the "
                            "context of %d characters; skipped", input_file, where, qas_id, answer_offset,
                            len(orig_answer_text), len(char_to_word_offset))
            self.skipped_offset += 1
            return None
        start_position = char_to_word_offset[answer_offset]
        end_position = char_to_word_offset[answer_end]
        # Only keep answers whose text can be exactly recovered from the document.
        actual_text = " ".join(doc_tokens[start_position:(end_position + 1)])
        cleaned_answer_text = " ".join(tokenization.whitespace_tokenize(orig_answer_text))
        if actual_text.find(cleaned_answer_text) == -1:
            logging.warning("Could not find answer: '%s' vs. '%s'", actual_text, cleaned_answer_text)
            self.skipped_mismatch += 1
            return None
        return orig_answer_text, start_position, end_position, False


def _improve_answer_span(doc_tokens, input_start, input_end, tokenizer, orig_answer_text):
    """Returns the sub-token span that matches the tokenized annotated answer, if any."""
    tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
    for new_start in range(input_start, input_end + 1):
        for new_end in range(input_end, new_start - 1, -1):
            text_span = " ".join(doc_tokens[new_start:(new_end + 1)])
            if text_span == tok_answer_text:
                return new_start, new_end
    return input_start, input_end


def _check_is_max_context(doc_spans, cur_span_index, position):
    """Check if this is the 'max context' doc span for the token (doc_spans: windows with .start and .length, as
    the original's DocSpan; Python ints): plain Python, the rule packing.squad_windows applies
    (packing.max_context_span)."""
    return packing.max_context_span([(span.start, span.length) for span in doc_spans], position) == cur_span_index


# ---------------------------------------------------------------- features: packing.squad_windows


UNIQUE_ID_BASE = 1000000000
CONVERT_CHUNK = 1000  # examples packed per squad_windows call


class _DocPieces:
    """A context's words as WordPiece ids and tokens, with the original's word <-> piece index maps."""

    def __init__(self, doc_tokens, tokenizer):
        self.word_ids, self.tokens, self.orig_to_tok_index = [], [], []
        for token in doc_tokens:
            self.orig_to_tok_index.append(len(self.tokens))
            pieces = tokenizer.tokenize(token)
            self.tokens.extend(pieces)
            self.word_ids.append(tokenizer.convert_tokens_to_ids(pieces))


def _answer_pieces(example, doc, tokenizer):
    """The answer's first and last piece in the context (the original's improved span); -1, -1 for none."""
    if example.is_impossible:
        return -1, -1
    start = doc.orig_to_tok_index[example.start_position]
    if example.end_position < len(example.doc_tokens) - 1:
        end = doc.orig_to_tok_index[example.end_position + 1] - 1
    else:
        end = len(doc.tokens) - 1
    return _improve_answer_span(doc.tokens, start, end, tokenizer, example.orig_answer_text)


NUM_FEATURES_TO_LOG = 20


def convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride, max_query_length, is_training,
                                 output_fn):
    """Windows every example into InputFeatures (packing.squad_windows, as the exported serving_text windows)
    and passes each to `output_fn`, as the original.

    Returns the number of features. Questions longer than `max_query_length` sub-tokens are
    truncated (counted in the log, as the original does silently). The first NUM_FEATURES_TO_LOG are logged.
    """
    if max_seq_length <= max_query_length + 3:
        raise cli.UserError("--max_seq_length=%d must be greater than --max_query_length=%d + 3"
                            % (max_seq_length, max_query_length))
    windowing = packing.Windowing(max_seq_length, doc_stride, max_query_length)
    special_ids = packing.SpecialIds.of(tokenizer.vocab)
    docs = {}  # examples of one paragraph share their doc_tokens list: tokenize it once
    num_features = num_truncated_queries = 0
    for chunk_start in range(0, len(examples), CONVERT_CHUNK):
        chunk = examples[chunk_start:chunk_start + CONVERT_CHUNK]
        queries, pieces, answers = [], [], []
        for example in chunk:
            query = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.question_text))
            num_truncated_queries += len(query) > max_query_length
            queries.append(query)
            doc = docs.get(id(example.doc_tokens))
            if doc is None or doc[0] is not example.doc_tokens:
                doc = docs[id(example.doc_tokens)] = (example.doc_tokens, _DocPieces(example.doc_tokens, tokenizer))
            pieces.append(doc[1].word_ids)
            if is_training:
                answers.append(_answer_pieces(example, doc[1], tokenizer))
        packed = packing.squad_windows(packing.ragged_ids(queries), packing.ragged_word_ids(pieces), windowing,
                                       special_ids, tuple(zip(*answers)) if answers else None)
        packed = {name: value.numpy() for name, value in packed.items()}
        packed["example_index"] += chunk_start
        for feature in features_from_packed(packed, tokenizer.inv_vocab, UNIQUE_ID_BASE + num_features):
            if is_training:
                feature.is_impossible = examples[feature.example_index].is_impossible
            if feature.unique_id - UNIQUE_ID_BASE < NUM_FEATURES_TO_LOG:
                _log_feature(feature, is_training)
            output_fn(feature)
            num_features += 1
    if num_truncated_queries:
        logging.info("%d of %d questions were longer than max_query_length=%d sub-tokens and were "
                     "truncated", num_truncated_queries, len(examples), max_query_length)
    return num_features


def features_from_packed(packed, vocab, base_unique_id=UNIQUE_ID_BASE):
    """InputFeatures from packing.squad_windows' outputs (numpy); `vocab` maps ids to tokens
    (FullTokenizer.inv_vocab)."""
    features = []
    for k in range(len(packed["example_index"])):
        mask = packed["input_mask"][k]
        n = int(mask.sum())
        ids = [int(x) for x in packed["input_ids"][k]]
        orig = packed["token_to_orig"][k]
        context = [i for i in range(n) if orig[i] >= 0]
        feature = InputFeatures(
            unique_id=base_unique_id + k, example_index=int(packed["example_index"][k]),
            doc_span_index=int(packed["doc_span_index"][k]), tokens=[vocab[i] for i in ids[:n]],
            token_to_orig_map={i: int(orig[i]) for i in context},
            token_is_max_context={i: bool(packed["token_is_max_context"][k][i]) for i in context},
            input_ids=ids, input_mask=[int(x) for x in mask],
            segment_ids=[int(x) for x in packed["segment_ids"][k]])
        if "start_positions" in packed:
            feature.start_position = int(packed["start_positions"][k])
            feature.end_position = int(packed["end_positions"][k])
        features.append(feature)
    return features


def _log_feature(feature, is_training):
    logging.info("*** Example ***")
    logging.info("unique_id: %s", feature.unique_id)
    logging.info("example_index: %s", feature.example_index)
    logging.info("doc_span_index: %s", feature.doc_span_index)
    logging.info("tokens: %s", " ".join(tokenization.printable_text(x) for x in feature.tokens))
    logging.info("token_to_orig_map: %s",
                 " ".join("%d:%d" % (x, y) for x, y in feature.token_to_orig_map.items()))
    logging.info("token_is_max_context: %s",
                 " ".join("%d:%s" % (x, y) for x, y in feature.token_is_max_context.items()))
    logging.info("input_ids: %s", " ".join(str(x) for x in feature.input_ids))
    logging.info("input_mask: %s", " ".join(str(x) for x in feature.input_mask))
    logging.info("segment_ids: %s", " ".join(str(x) for x in feature.segment_ids))
    if is_training and feature.is_impossible:
        logging.info("impossible example")
    if is_training and not feature.is_impossible:
        answer_text = " ".join(feature.tokens[feature.start_position:(feature.end_position + 1)])
        logging.info("start_position: %d", feature.start_position)
        logging.info("end_position: %d", feature.end_position)
        logging.info("answer: %s", tokenization.printable_text(answer_text))


# ---------------------------------------------------------------- decoding


RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])

_PrelimPrediction = collections.namedtuple(
    "PrelimPrediction", ["feature_index", "start_index", "end_index", "start_logit", "end_logit"])
_NbestPrediction = collections.namedtuple("NbestPrediction", ["text", "start_logit", "end_logit"])


def _get_best_indexes(logits, n_best_size):
    """Indexes of the `n_best_size` largest logits (ties keep their order)."""
    index_and_score = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
    return [index for index, _ in index_and_score[:n_best_size]]


def _compute_softmax(scores):
    if not scores:
        return []
    max_score = max(scores)
    exp_scores = [math.exp(score - max_score) for score in scores]
    total_sum = 0.0
    for x in exp_scores:
        total_sum += x
    return [x / total_sum for x in exp_scores]


def _strip_spaces(text):
    ns_chars = []
    ns_to_s_map = collections.OrderedDict()
    for i, c in enumerate(text):
        if c == " ":
            continue
        ns_to_s_map[len(ns_chars)] = i
        ns_chars.append(c)
    return "".join(ns_chars), ns_to_s_map


class _WordTokenCache:
    """BasicTokenizer output per whitespace word, memoized.

    BasicTokenizer works per character and splits on whitespace, so the tokens of words joined by
    spaces are the concatenation of each word's tokens: get_final_text's tokenization of a span
    is assembled from cached words, with the same result.
    """

    def __init__(self, do_lower_case):
        self._tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
        self._cache = {}

    def tok_text(self, words):
        out = []
        for word in words:
            tokens = self._cache.get(word)
            if tokens is None:
                tokens = self._tokenizer.tokenize(word)
                self._cache[word] = tokens
            out.extend(tokens)
        return " ".join(out)


def _align_final_text(pred_text, orig_text, tok_text, verbose_logging):
    """get_final_text given tok_text, the BasicTokenizer tokens of orig_text joined by spaces."""
    start_position = tok_text.find(pred_text)
    if start_position == -1:
        if verbose_logging:
            logging.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
        return orig_text
    end_position = start_position + len(pred_text) - 1

    orig_ns_text, orig_ns_to_s_map = _strip_spaces(orig_text)
    tok_ns_text, tok_ns_to_s_map = _strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        if verbose_logging:
            logging.info("Length not equal after stripping spaces: '%s' vs '%s'",
                         orig_ns_text, tok_ns_text)
        return orig_text

    tok_s_to_ns_map = {tok_index: i for i, tok_index in tok_ns_to_s_map.items()}
    # The positions in tok_text, through the texts without spaces, in orig_text.
    orig_positions = [orig_ns_to_s_map.get(tok_s_to_ns_map.get(position)) for position in (start_position,
                                                                                             end_position)]
    for name, orig_position in zip(("start", "end"), orig_positions):
        if orig_position is None:
            if verbose_logging:
                logging.info("Couldn't map %s position", name)
            return orig_text
    return orig_text[orig_positions[0]:(orig_positions[1] + 1)]


def compute_predictions(all_examples, all_features, all_results, answering, do_lower_case,
                        verbose_logging=False):
    """N-best decoding of start/end logits, as the original write_predictions, with the rules of `answering`
    (serving.SquadAnswering: n_best_size, max_answer_length, version_2_with_negative, null_score_diff_threshold).

    Returns (predictions, nbest, null score diffs) as ordered dicts keyed by question id; the
    third is empty unless `version_2_with_negative`.
    """
    n_best_size, max_answer_length = answering.n_best_size, answering.max_answer_length
    version_2_with_negative = answering.version_2_with_negative
    example_index_to_features = collections.defaultdict(list)
    for feature in all_features:
        example_index_to_features[feature.example_index].append(feature)
    unique_id_to_result = {result.unique_id: result for result in all_results}
    missing = [f.unique_id for f in all_features if f.unique_id not in unique_id_to_result]
    if missing:
        raise ValueError("no model result for %d of %d features (first unique_id %d)"
                         % (len(missing), len(all_features), missing[0]))

    all_predictions = collections.OrderedDict()
    all_nbest_json = collections.OrderedDict()
    scores_diff_json = collections.OrderedDict()
    word_tokens = _WordTokenCache(do_lower_case)

    def final_text(tok_text, orig_tokens):
        return _align_final_text(tok_text, " ".join(orig_tokens), word_tokens.tok_text(orig_tokens), verbose_logging)

    for example_index, example in enumerate(all_examples):
        features = example_index_to_features[example_index]
        prelim, null = _prelim_predictions(features, unique_id_to_result, n_best_size, max_answer_length,
                                           version_2_with_negative)
        nbest = _nbest(prelim, null, features, example, answering, final_text)
        nbest_json, best_non_null_entry = _nbest_json(nbest)
        if not version_2_with_negative:
            all_predictions[example.qas_id] = nbest_json[0]["text"]
        elif best_non_null_entry is None:
            # Only the null answer survived (the original fails here): predict "" with the null
            # score as its score difference, as tf-models-official does.
            logging.warning("question %s: no valid non-null answer span; predicting \"\"",
                            example.qas_id)
            scores_diff_json[example.qas_id] = null.score
            all_predictions[example.qas_id] = ""
        else:
            # Predict "" iff the null score minus the best non-null score exceeds the threshold.
            score_diff = (null.score - best_non_null_entry.start_logit
                          - best_non_null_entry.end_logit)
            scores_diff_json[example.qas_id] = score_diff
            if score_diff > answering.null_score_diff_threshold:
                all_predictions[example.qas_id] = ""
            else:
                all_predictions[example.qas_id] = best_non_null_entry.text
        all_nbest_json[example.qas_id] = nbest_json
    return all_predictions, all_nbest_json, scores_diff_json


_NullScore = collections.namedtuple("NullScore", ["score", "feature_index", "start_logit", "end_logit"])


def _prelim_predictions(features, unique_id_to_result, n_best_size, max_answer_length,
                        version_2_with_negative):
    """Candidate spans of an example's windows, best first, and the minimum null score over its windows."""
    prelim_predictions = []
    # The minimum null score ([CLS] start + end) over the example's windows.
    null = _NullScore(1000000, 0, 0, 0)
    for feature_index, feature in enumerate(features):
        result = unique_id_to_result[feature.unique_id]
        start_indexes = _get_best_indexes(result.start_logits, n_best_size)
        end_indexes = _get_best_indexes(result.end_logits, n_best_size)
        if version_2_with_negative:
            feature_null_score = result.start_logits[0] + result.end_logits[0]
            if feature_null_score < null.score:
                null = _NullScore(feature_null_score, feature_index, result.start_logits[0],
                                  result.end_logits[0])
        num_tokens = len(feature.tokens)
        for start_index in start_indexes:
            for end_index in end_indexes:
                # Drop spans in the question or padding, outside the max context, reversed or too long.
                if start_index >= num_tokens or end_index >= num_tokens:
                    continue
                if start_index not in feature.token_to_orig_map:
                    continue
                if end_index not in feature.token_to_orig_map:
                    continue
                if not feature.token_is_max_context.get(start_index, False):
                    continue
                if end_index < start_index:
                    continue
                if end_index - start_index + 1 > max_answer_length:
                    continue
                prelim_predictions.append(_PrelimPrediction(
                    feature_index=feature_index, start_index=start_index,
                    end_index=end_index, start_logit=result.start_logits[start_index],
                    end_logit=result.end_logits[end_index]))
    if version_2_with_negative:
        prelim_predictions.append(_PrelimPrediction(
            feature_index=null.feature_index, start_index=0, end_index=0,
            start_logit=null.start_logit, end_logit=null.end_logit))
    prelim_predictions = sorted(prelim_predictions, key=lambda x: (x.start_logit + x.end_logit), reverse=True)
    return prelim_predictions, null


def _nbest(prelim_predictions, null, features, example, answering, final_text):
    """The n best distinct answer texts (the null answer "" among them for 2.0); final_text(tok_text, orig_tokens)
    is get_final_text's answer for a span."""
    n_best_size, version_2_with_negative = answering.n_best_size, answering.version_2_with_negative
    seen_predictions = {}
    nbest = []
    for pred in prelim_predictions:
        if len(nbest) >= n_best_size:
            break
        if pred.start_index > 0:  # a non-null prediction
            feature = features[pred.feature_index]
            tok_tokens = feature.tokens[pred.start_index:(pred.end_index + 1)]
            orig_doc_start = feature.token_to_orig_map[pred.start_index]
            orig_doc_end = feature.token_to_orig_map[pred.end_index]
            orig_tokens = example.doc_tokens[orig_doc_start:(orig_doc_end + 1)]
            tok_text = " ".join(tok_tokens)
            # De-tokenize WordPieces and clean whitespace.
            tok_text = tok_text.replace(" ##", "")
            tok_text = tok_text.replace("##", "")
            tok_text = tok_text.strip()
            tok_text = " ".join(tok_text.split())
            text = final_text(tok_text, orig_tokens)
            if text in seen_predictions:
                continue
            seen_predictions[text] = True
        else:
            text = ""
            seen_predictions[text] = True
        nbest.append(_NbestPrediction(text=text, start_logit=pred.start_logit, end_logit=pred.end_logit))
    if version_2_with_negative and "" not in seen_predictions:
        nbest.append(_NbestPrediction(text="", start_logit=null.start_logit, end_logit=null.end_logit))
    # In rare cases there is no valid span (e.g. an empty context): the original's nonce.
    if not nbest:
        logging.warning("question %s: no valid answer span; predicting \"empty\" as the original does",
                        example.qas_id)
        nbest.append(_NbestPrediction(text="empty", start_logit=0.0, end_logit=0.0))
    return nbest


def _nbest_json(nbest):
    """(nbest_predictions.json entries with probabilities, the best entry with a non-empty text or None)."""
    total_scores = []
    best_non_null_entry = None
    for entry in nbest:
        total_scores.append(entry.start_logit + entry.end_logit)
        if not best_non_null_entry and entry.text:
            best_non_null_entry = entry
    probs = _compute_softmax(total_scores)
    nbest_json = []
    for i, entry in enumerate(nbest):
        output = collections.OrderedDict()
        output["text"] = entry.text
        output["probability"] = probs[i]
        output["start_logit"] = entry.start_logit
        output["end_logit"] = entry.end_logit
        nbest_json.append(output)
    return nbest_json, best_non_null_entry


def prediction_json(obj):
    """The original's JSON layout of the prediction files (indent 4, final newline)."""
    return json.dumps(obj, indent=4) + "\n"


def write_predictions(all_examples, all_features, all_results, n_best_size, max_answer_length, do_lower_case,
                      output_prediction_file, output_nbest_file, output_null_log_odds_file):
    """Write final predictions to the json file and log-odds of null if needed: the original's three files (any
    file system), from compute_predictions with FLAGS.version_2_with_negative, FLAGS.null_score_diff_threshold
    and FLAGS.verbose_logging, as the original reads them."""
    logging.info("Writing predictions to: %s", output_prediction_file)
    logging.info("Writing nbest to: %s", output_nbest_file)
    answering = serving.SquadAnswering(n_best_size=n_best_size, max_answer_length=max_answer_length,
                                       version_2_with_negative=FLAGS.version_2_with_negative,
                                       null_score_diff_threshold=FLAGS.null_score_diff_threshold)
    predictions, nbest, scores_diff = compute_predictions(all_examples, all_features, all_results, answering,
                                                          do_lower_case, FLAGS.verbose_logging)
    outputs = [(output_prediction_file, predictions), (output_nbest_file, nbest)]
    if answering.version_2_with_negative:
        outputs.append((output_null_log_odds_file, scores_diff))
    for path, obj in outputs:
        with tf.io.gfile.GFile(path, "w") as writer:
            writer.write(prediction_json(obj))


def get_final_text(pred_text, orig_text, do_lower_case):
    """Project the tokenized prediction back to the original text (the original's alignment heuristic: orig_text
    itself when it fails, logged when FLAGS.verbose_logging)."""
    tok_text = " ".join(tokenization.BasicTokenizer(do_lower_case=do_lower_case).tokenize(orig_text))
    return _align_final_text(pred_text, orig_text, tok_text, FLAGS.verbose_logging)


# ---------------------------------------------------------------- records, task, job


class FeatureWriter:
    """Writes InputFeatures to a TFRecord file of tf.train.Example, as the original."""

    def __init__(self, filename, is_training):
        self.filename = filename
        self.is_training = is_training
        self._writer = records.RecordFile(filename, records.squad(None, is_training))

    @property
    def num_features(self):
        return self._writer.count

    def process_feature(self, feature):
        features = collections.OrderedDict(
            unique_ids=[feature.unique_id], input_ids=feature.input_ids, input_mask=feature.input_mask,
            segment_ids=feature.segment_ids)
        if self.is_training:
            features["start_positions"] = [feature.start_position]
            features["end_positions"] = [feature.end_position]
            features["is_impossible"] = [1 if feature.is_impossible else 0]
        self._writer.write(features)

    def close(self):
        self._writer.close()


def input_fn_builder(input_file, seq_length, is_training, drop_remainder):
    """The original's `input_fn(params)` over a FeatureWriter file: input_fn({"batch_size": n}) is a
    tf.data.Dataset of batches (int32 features); when training, repeated and shuffled in a buffer of 100 records."""
    make = records.input_fn(input_file, records.squad(seq_length, is_training), is_training, drop_remainder)
    return lambda params: make(params["batch_size"])


def squad_loss(start_logits, end_logits, start_positions, end_positions):
    """Mean over the batch of the start and end cross entropies, averaged (the original's loss)."""
    seq_length = tf.shape(start_logits)[1]

    def compute_loss(logits, positions):
        one_hot_positions = tf.one_hot(positions, depth=seq_length, dtype=tf.float32)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        return -tf.reduce_mean(tf.reduce_sum(one_hot_positions * log_probs, axis=-1))

    start_loss = compute_loss(start_logits, start_positions)
    end_loss = compute_loss(end_logits, end_positions)
    return (start_loss + end_loss) / 2.0


class SquadTask(training.Task):
    """The SQuAD job for training.py: span loss and start/end logits for prediction."""

    sequence_outputs = ("start_logits", "end_logits")

    def __init__(self, bert_config):
        self.bert_config = bert_config

    def build_model(self, elementwise_dtype="float32"):
        return encoder.SquadModel(self.bert_config, elementwise_dtype=elementwise_dtype)

    def compute_loss(self, model, features, training, dropout_seed=None):
        start_logits, end_logits = model(features, training=training, dropout_seed=dropout_seed)
        loss = squad_loss(start_logits, end_logits, features["start_positions"], features["end_positions"])
        return loss, {"loss": loss}

    def predict_outputs(self, model, features):
        start_logits, end_logits = model(features, training=False)
        return {"unique_ids": features["unique_ids"], "start_logits": start_logits, "end_logits": end_logits}


# ----------------------------------------------------------------------------------------------
# The original's create_model and model_fn_builder, on TensorFlow 2 (modeling's original API).


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids, use_one_hot_embeddings):
    """The original's SQuAD model, eagerly or in a tf.function: modeling.BertModel and, on every position of its
    sequence output, the layer `cls/squad/output_weights` [2, hidden_size] and `cls/squad/output_bias` [2] (no
    dropout; SquadModel's) -> (start_logits, end_logits), each float32 [batch_size, seq_length]. The variables
    are modeling's, made once per name (modeling.trainable_variables() lists them)."""
    model = modeling.BertModel(config=bert_config, is_training=is_training, input_ids=input_ids,
                               input_mask=input_mask, token_type_ids=segment_ids,
                               use_one_hot_embeddings=use_one_hot_embeddings)
    with tf.compat.v1.variable_scope("cls/squad"):
        logits = modeling.output_layer(model.get_sequence_output(), 2, is_training, dropout_prob=0.0)
    return logits[:, :, 0], logits[:, :, 1]


def model_fn_builder(bert_config, init_checkpoint, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings):
    """The original's model_fn_builder. TensorFlow 2.16+ has no tf.estimator to run a model_fn: call the model_fn
    it returns yourself, eagerly or in a tf.function, `model_fn(features, labels=None, mode, params=None)` on a
    batch of features (unique_ids, input_ids, input_mask, segment_ids; start_positions and end_positions to
    train) -> modeling.EstimatorSpec:
      mode PREDICT: predictions {"unique_ids", "start_logits", "end_logits"} (write_predictions' RawResult);
      mode TRAIN: loss (squad_loss, the original's) and train_op, a function: train_op() runs one step of
        optimization.create_optimizer on this batch (one optimizer for every call of this builder's model_fn,
        as the original's graph had one) and returns the loss.
    Its first call loads init_checkpoint into modeling's variables by the assignment map, as the original's did
    (original_model_fn). Any other mode is the original's ValueError. run_squad.py --do_train / --do_predict
    runs the whole job."""
    loader = original_model_fn.CheckpointLoader(init_checkpoint)

    def logits(features, is_training):
        return create_model(bert_config, is_training, features["input_ids"], features["input_mask"],
                            features["segment_ids"], use_one_hot_embeddings)

    def training_loss(features):
        start_logits, end_logits = logits(features, True)
        return squad_loss(start_logits, end_logits, features["start_positions"], features["end_positions"])

    train_op = original_model_fn.TrainOp(training_loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu)

    def model_fn(features, labels=None, mode=modeling.ModeKeys.PREDICT, params=None):
        if mode == modeling.ModeKeys.TRAIN:
            loss = original_model_fn.load_once(loader, lambda: training_loss(features))
            return modeling.EstimatorSpec(mode=mode, predictions=None, loss=loss,
                                          train_op=train_op.for_batch(features))
        if mode == modeling.ModeKeys.PREDICT:
            start_logits, end_logits = original_model_fn.load_once(loader, lambda: logits(features, False))
            return modeling.EstimatorSpec(mode=mode, predictions={"unique_ids": features["unique_ids"],
                                                                  "start_logits": start_logits,
                                                                  "end_logits": end_logits},
                                          loss=None, train_op=None)
        raise ValueError("Only TRAIN and PREDICT modes are supported: %s" % (mode))

    return model_fn


def decode_text_outputs(questions, contexts, outputs, tokenizer, answering, qas_ids=None):
    """Answers from serving_text outputs (numpy arrays), with the original's n-best decoding and the rules of
    `answering` (serving.SquadAnswering); `tokenizer` is the model's FullTokenizer (its vocabulary and casing).

    Returns (predictions, nbest, null score diffs) keyed by `qas_ids` (default "0", "1", ...).
    """
    qas_ids = qas_ids or [str(i) for i in range(len(questions))]
    examples = [SquadExample(qas_id=qid, question_text=question,
                             doc_tokens=split_context(context)[0])
                for qid, question, context in zip(qas_ids, questions, contexts)]
    features = features_from_packed(outputs, tokenizer.inv_vocab)
    results = [RawResult(f.unique_id, [float(x) for x in outputs["start_logits"][k]],
                         [float(x) for x in outputs["end_logits"][k]])
               for k, f in enumerate(features)]
    return compute_predictions(examples, features, results, answering, tokenizer.do_lower_case)


def validate_flags_or_throw(bert_config, max_seq_length, max_query_length):
    """The original's checks of the sequence lengths; errors name the flag."""
    model_options.check_seq_length(bert_config, max_seq_length)
    if max_seq_length <= max_query_length + 3:
        raise cli.UserError("The max_seq_length (%d) must be greater than max_query_length (%d) + 3"
                            % (max_seq_length, max_query_length))


def _has_gold_answers(input_file):
    data = load_squad_json(input_file)
    qas = [qa for entry in data for p in entry.get("paragraphs", []) for qa in p.get("qas", [])]
    return bool(qas) and all(isinstance(qa, dict) and "answers" in qa for qa in qas)


def predict_features(task, features, config, strategy, checkpoint_path=None):
    """RawResults of the model over eval features, in feature order (full-length windows: the n-best choice
    looks at the logits of every position, padding included, as the original's)."""
    arrays = {"unique_ids": np.array([f.unique_id for f in features], np.int64),
              "input_ids": np.array([f.input_ids for f in features], np.int32),
              "input_mask": np.array([f.input_mask for f in features], np.int32),
              "segment_ids": np.array([f.segment_ids for f in features], np.int32)}
    outputs = runner.predict_arrays(task, arrays, config, strategy, checkpoint_path, real_lengths=False)
    return [RawResult(unique_id=int(outputs["unique_ids"][i]),
                      start_logits=[float(x) for x in outputs["start_logits"][i]],
                      end_logits=[float(x) for x in outputs["end_logits"][i]]) for i in range(len(features))]


@dataclasses.dataclass
class SquadOptions(runner.RecordFinetuningOptions):
    """run_squad.py's flags: the fine-tuning runners' (runner.RecordFinetuningOptions, --max_seq_length 384; no
    --do_eval: --do_predict scores a predict file that has answers) and the original's SQuAD flags (windowing and
    answer rules: serving.SquadAnswering), plus --train_first_answer."""
    model: ModelOptions = cli.nested(ModelOptions, required=("bert_config_file", "vocab_file"),
                                     defaults={"max_seq_length": 384})
    answering: serving.SquadAnswering = cli.nested(serving.SquadAnswering)
    train_file: str = cli.option(None, "SQuAD json for training. E.g., train-v1.1.json")
    predict_file: str = cli.option(None, "SQuAD json for predictions. E.g., dev-v1.1.json or test-v1.1.json")
    do_eval: bool = cli.option(False, flag=False)
    do_predict: bool = cli.option(False, "Whether to run eval on the dev set.")
    verbose_logging: bool = cli.option(False, "If true, all of the warnings related to data processing will be "
                                       "printed. A number of warnings are expected for a normal SQuAD evaluation.")
    train_first_answer: bool = cli.option(False, "Train on the first answer of questions that have several (the "
                                          "original requires exactly one answer per training question, as in "
                                          "train-v1.1.json).")


class Job(runner.Job):
    """One run_squad.py invocation: SQuAD reading, windows, n-best decoding and the official scores on
    runner.Job's steps (predict writes predictions.json, nbest_predictions.json, null_odds.json for 2.0, and
    eval_results.json when the predict file has answers)."""

    def __init__(self, options):
        super().__init__(options)
        validate_flags_or_throw(self.bert_config, self.model.max_seq_length, options.answering.max_query_length)
        for enabled, flag, path in ((options.do_train, "--train_file", options.train_file),
                                    (options.do_predict, "--predict_file", options.predict_file)):
            if enabled:
                if not path:
                    raise cli.UserError("If `%s` is True, then `%s` must be specified." % (
                        "do_train" if flag == "--train_file" else "do_predict", flag[2:]))
                filesystem.require_file(path, flag)
        self.task = SquadTask(self.bert_config)
        self.scores = None

    def read_data(self):
        """SQuAD files are read by the steps that use them (their errors name the file and the place)."""

    def windows(self, examples, is_training, output_fn):
        answering = self.options.answering
        return convert_examples_to_features(examples, self.tokenizer, self.model.max_seq_length, answering.doc_stride,
                                            answering.max_query_length, is_training, output_fn)

    def train(self):
        options = self.options
        train_examples = read_squad_examples(options.train_file, is_training=True,
                                             version_2_with_negative=options.answering.version_2_with_negative,
                                             train_first_answer=options.train_first_answer)
        runner.require_examples(train_examples, f"--train_file={options.train_file}", "training questions")
        config = self.finetuning_config(len(train_examples), what="orig examples")
        # Pre-shuffle the examples so that a small shuffle buffer suffices, as the original.
        random.Random(12345).shuffle(train_examples)
        writer = FeatureWriter(self.record_path("train.tf_record"), is_training=True)
        self.windows(train_examples, True, writer.process_feature)
        writer.close()
        logging.info("  Num split examples = %d", writer.num_features)
        input_fn = self.train_input_fn(writer.filename, records.squad(self.model.max_seq_length, True),
                                       writer.num_features, config.seed)
        return self.train_loop(input_fn, config)

    def predict(self):
        """Writes predictions.json, nbest_predictions.json (and null_odds.json, and eval_results.json when the
        file has answers); returns the predictions."""
        options = self.options
        eval_examples = runner.require_examples(
            read_squad_examples(options.predict_file, is_training=False,
                                version_2_with_negative=options.answering.version_2_with_negative),
            f"--predict_file={options.predict_file}", "questions")
        eval_features = []
        self.windows(eval_examples, False, eval_features.append)
        logging.info("***** Running predictions *****")
        logging.info("  Num orig examples = %d", len(eval_examples))
        logging.info("  Num split examples = %d", len(eval_features))
        logging.info("  Batch size = %d", self.config.predict_batch_size)
        all_results = predict_features(self.task, eval_features, self.config, self.inference_strategy,
                                       self.inference_checkpoint()[0])
        predictions, nbest, scores_diff = compute_predictions(
            eval_examples, eval_features, all_results, options.answering, self.model.do_lower_case,
            options.verbose_logging)
        predictions_path = self.write_output("predictions.json", prediction_json(predictions))
        self.write_output("nbest_predictions.json", prediction_json(nbest))
        null_odds = (self.write_output("null_odds.json", prediction_json(scores_diff))
                     if options.answering.version_2_with_negative else None)
        self.scores = self.official_scores(predictions_path, null_odds)
        return predictions

    def official_scores(self, predictions_path, null_odds_path):
        """The official scores of predictions.json when the predict file has answers (written to
        eval_results.json), else None."""
        predict_file = self.options.predict_file
        if not _has_gold_answers(predict_file):
            return None
        try:
            result, text = squad_evaluation.run(
                predict_file, predictions_path,
                version="2.0" if self.options.answering.version_2_with_negative else "auto",
                na_prob_file=null_odds_path)
        except squad_evaluation.SquadEvaluationError as e:
            logging.warning("Predictions written, but %s cannot be scored: %s", predict_file, e)
            return None
        self.write_output("eval_results.json", text + "\n")
        logging.info("***** Eval results (official SQuAD metrics) *****\n%s", text)
        return result

    def serving(self, model):
        return serving.SquadServing(model, self.model, self.options.answering)


def run(options):
    """The whole job for SquadOptions; returns {"train", "predict" (predictions), "eval" (official scores, when
    the predict file has answers), "export"} for what ran."""
    job = Job(options)
    results = job.run()
    if job.scores is not None:
        results["eval"] = job.scores
    return results


if __name__ == "__main__":
    cli.main(SquadOptions, run)
