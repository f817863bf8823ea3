# coding=utf-8
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
end_logits) and serving_text (question, context strings -> the windows convert_examples_to_features
would make, with their logits); decode_text_outputs() turns the latter into answers. Loading it needs
`import tensorflow_text`.
"""

import collections
import dataclasses
import json
import math
import os
import random

from absl import app
from absl import flags
from absl import logging
import keras
import tensorflow as tf

import checkpoints
import fast_tokenization
import modeling
import squad_evaluation
import tokenization
import training

FLAGS = flags.FLAGS

# Whitespace of the original reader: space, tab, CR, LF and U+202F (narrow no-break space).
_READER_WHITESPACE = frozenset(" \t\r\n\u202f")


class SquadDataError(ValueError):
    """Bad SQuAD input; the message names the file, the place in it and what was expected."""


class SquadExample(object):
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


class InputFeatures(object):
    """One window of one example, ready for the model."""

    def __init__(self, unique_id, example_index, doc_span_index, tokens, token_to_orig_map,
                 token_is_max_context, input_ids, input_mask, segment_ids, start_position=None,
                 end_position=None, is_impossible=None):
        self.unique_id = unique_id
        self.example_index = example_index
        self.doc_span_index = doc_span_index
        self.tokens = tokens
        self.token_to_orig_map = token_to_orig_map
        self.token_is_max_context = token_is_max_context
        self.input_ids = input_ids
        self.input_mask = input_mask
        self.segment_ids = segment_ids
        self.start_position = start_position
        self.end_position = end_position
        self.is_impossible = is_impossible


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
        with open(input_file, "r", encoding="utf-8") as reader:
            input_json = json.load(reader)
    except OSError as e:
        raise SquadDataError("cannot read SQuAD file %s: %s" % (input_file, e)) from e
    except ValueError as e:
        raise SquadDataError("SQuAD file %s is not valid JSON: %s" % (input_file, e)) from e
    return _field(input_json, "data", list, input_file, "the top-level object")


def read_squad_examples(input_file, is_training, version_2_with_negative=False,
                        train_first_answer=False, return_stats=False):
    """Reads a SQuAD JSON file into a list of SquadExample (the original's rules).

    For training, answers whose text cannot be recovered from the context at the given offset
    are logged and skipped, as the original does; the count is logged at the end.
    `train_first_answer` lets training use the first of several answers (the original requires
    exactly one).
    """
    input_data = load_squad_json(input_file)
    examples = []
    questions = 0
    skipped_mismatch = 0
    skipped_offset = 0
    empty_contexts = 0
    first_of_several = 0
    for a_index, entry in enumerate(input_data):
        paragraphs = _field(entry, "paragraphs", list, input_file, "data[%d]" % a_index)
        for p_index, paragraph in enumerate(paragraphs):
            where_p = "data[%d].paragraphs[%d]" % (a_index, p_index)
            paragraph_text = _field(paragraph, "context", str, input_file, where_p)
            qas = _field(paragraph, "qas", list, input_file, where_p)
            doc_tokens, char_to_word_offset = split_context(paragraph_text)
            if not doc_tokens:
                empty_contexts += 1
                logging.warning("SQuAD file %s: %s has an empty context; its %d questions get no "
                                "features (answerable training questions are skipped, others "
                                "get the original's empty prediction)", input_file, where_p,
                                len(qas))
            for q_index, qa in enumerate(qas):
                where = "%s.qas[%d]" % (where_p, q_index)
                qas_id = _field(qa, "id", (str, int), input_file, where)
                question_text = _field(qa, "question", str, input_file, where)
                questions += 1
                start_position = None
                end_position = None
                orig_answer_text = None
                is_impossible = False
                if is_training:
                    if version_2_with_negative:
                        is_impossible = _field(qa, "is_impossible", bool, input_file, where)
                    answers = _field(qa, "answers", list, input_file, where)
                    if len(answers) != 1 and not is_impossible:
                        if not (train_first_answer and answers):
                            raise SquadDataError(
                                "SQuAD file %s: %s (id %s) has %d answers; for training, each "
                                "question should have exactly 1 answer (set "
                                "--train_first_answer to train on the first one)"
                                % (input_file, where, qas_id, len(answers)))
                        first_of_several += 1
                    if not is_impossible:
                        if not doc_tokens:
                            skipped_offset += 1
                            continue
                        answer = answers[0]
                        orig_answer_text = _field(answer, "text", str, input_file,
                                                  where + ".answers[0]")
                        answer_offset = _field(answer, "answer_start", int, input_file,
                                               where + ".answers[0]")
                        answer_end = answer_offset + len(orig_answer_text) - 1
                        if (answer_offset < 0 or not orig_answer_text
                                or answer_end >= len(char_to_word_offset)):
                            logging.warning(
                                "SQuAD file %s: %s (id %s): answer_start %d with answer length "
                                "%d lies outside the context of %d characters; skipped",
                                input_file, where, qas_id, answer_offset, len(orig_answer_text),
                                len(char_to_word_offset))
                            skipped_offset += 1
                            continue
                        start_position = char_to_word_offset[answer_offset]
                        end_position = char_to_word_offset[answer_end]
                        # Only keep answers whose text can be exactly recovered from the document.
                        actual_text = " ".join(doc_tokens[start_position:(end_position + 1)])
                        cleaned_answer_text = " ".join(
                            tokenization.whitespace_tokenize(orig_answer_text))
                        if actual_text.find(cleaned_answer_text) == -1:
                            logging.warning("Could not find answer: '%s' vs. '%s'",
                                            actual_text, cleaned_answer_text)
                            skipped_mismatch += 1
                            continue
                    else:
                        start_position = -1
                        end_position = -1
                        orig_answer_text = ""
                examples.append(SquadExample(
                    qas_id=qas_id, question_text=question_text, doc_tokens=doc_tokens,
                    orig_answer_text=orig_answer_text, start_position=start_position,
                    end_position=end_position, is_impossible=is_impossible))
    stats = ReadStats(questions, len(examples), skipped_mismatch, skipped_offset, empty_contexts)
    if skipped_mismatch or skipped_offset or empty_contexts:
        logging.warning("SQuAD file %s: %d questions read, %d examples kept; skipped %d whose "
                        "answer text does not match the context, %d with an answer offset outside "
                        "the context; %d empty contexts", input_file, questions, len(examples),
                        skipped_mismatch, skipped_offset, empty_contexts)
    else:
        logging.info("SQuAD file %s: %d questions, %d examples", input_file, questions,
                     len(examples))
    if first_of_several:
        logging.info("SQuAD file %s: %d training questions have several answers; the first one "
                     "is used (--train_first_answer)", input_file, first_of_several)
    if return_stats:
        return examples, stats
    return examples


DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


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
    """Whether span `cur_span_index` gives token `position` its maximum context."""
    best_score = None
    best_span_index = None
    for span_index, doc_span in enumerate(doc_spans):
        end = doc_span.start + doc_span.length - 1
        if position < doc_span.start or position > end:
            continue
        num_left_context = position - doc_span.start
        num_right_context = end - position
        score = min(num_left_context, num_right_context) + 0.01 * doc_span.length
        if best_score is None or score > best_score:
            best_score = score
            best_span_index = span_index
    return cur_span_index == best_span_index


def make_doc_spans(num_doc_tokens, max_tokens_for_doc, doc_stride):
    """Sliding windows over the document's sub-tokens."""
    doc_spans = []
    start_offset = 0
    while start_offset < num_doc_tokens:
        length = min(num_doc_tokens - start_offset, max_tokens_for_doc)
        doc_spans.append(DocSpan(start=start_offset, length=length))
        if start_offset + length == num_doc_tokens:
            break
        start_offset += min(length, doc_stride)
    return doc_spans


def _tokenize_doc(doc_tokens, tokenizer):
    tok_to_orig_index = []
    orig_to_tok_index = []
    all_doc_tokens = []
    for i, token in enumerate(doc_tokens):
        orig_to_tok_index.append(len(all_doc_tokens))
        for sub_token in tokenizer.tokenize(token):
            tok_to_orig_index.append(i)
            all_doc_tokens.append(sub_token)
    return tok_to_orig_index, orig_to_tok_index, all_doc_tokens


def convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                 max_query_length, is_training, output_fn,
                                 log_examples=20):
    """Windows every example into InputFeatures and passes each to `output_fn`.

    Returns the number of features. Questions longer than `max_query_length` sub-tokens are
    truncated (counted in the log, as the original does silently).
    """
    if max_seq_length <= max_query_length + 3:
        raise ValueError("max_seq_length (%d) must be greater than max_query_length (%d) + 3"
                         % (max_seq_length, max_query_length))
    unique_id = 1000000000
    num_truncated_queries = 0
    doc_cache = {}
    for example_index, example in enumerate(examples):
        query_tokens = tokenizer.tokenize(example.question_text)
        if len(query_tokens) > max_query_length:
            query_tokens = query_tokens[0:max_query_length]
            num_truncated_queries += 1

        # Examples of one paragraph share their doc_tokens list: tokenize it once.
        cached = doc_cache.get(id(example.doc_tokens))
        if cached is None or cached[0] is not example.doc_tokens:
            cached = (example.doc_tokens,) + _tokenize_doc(example.doc_tokens, tokenizer)
            doc_cache[id(example.doc_tokens)] = cached
        _, tok_to_orig_index, orig_to_tok_index, all_doc_tokens = cached

        tok_start_position = None
        tok_end_position = None
        if is_training and example.is_impossible:
            tok_start_position = -1
            tok_end_position = -1
        if is_training and not example.is_impossible:
            tok_start_position = orig_to_tok_index[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
            else:
                tok_end_position = len(all_doc_tokens) - 1
            tok_start_position, tok_end_position = _improve_answer_span(
                all_doc_tokens, tok_start_position, tok_end_position, tokenizer,
                example.orig_answer_text)

        # [CLS], [SEP] and [SEP]
        max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
        doc_spans = make_doc_spans(len(all_doc_tokens), max_tokens_for_doc, doc_stride)

        for doc_span_index, doc_span in enumerate(doc_spans):
            tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
            segment_ids = [0] * len(tokens)
            token_to_orig_map = {}
            token_is_max_context = {}
            for i in range(doc_span.length):
                split_token_index = doc_span.start + i
                token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
                token_is_max_context[len(tokens)] = _check_is_max_context(
                    doc_spans, doc_span_index, split_token_index)
                tokens.append(all_doc_tokens[split_token_index])
                segment_ids.append(1)
            tokens.append("[SEP]")
            segment_ids.append(1)

            input_ids, input_mask, segment_ids = tokenization.ids_and_padding(
                tokenizer, tokens, segment_ids, max_seq_length)

            start_position = None
            end_position = None
            if is_training and not example.is_impossible:
                # A window that does not contain the whole answer is labelled [CLS] (0, 0).
                doc_start = doc_span.start
                doc_end = doc_span.start + doc_span.length - 1
                if tok_start_position >= doc_start and tok_end_position <= doc_end:
                    doc_offset = len(query_tokens) + 2
                    start_position = tok_start_position - doc_start + doc_offset
                    end_position = tok_end_position - doc_start + doc_offset
                else:
                    start_position = 0
                    end_position = 0
            if is_training and example.is_impossible:
                start_position = 0
                end_position = 0

            if example_index < log_examples:
                _log_feature(unique_id, example_index, doc_span_index, tokens, token_to_orig_map,
                             token_is_max_context, input_ids, input_mask, segment_ids,
                             is_training, example.is_impossible, start_position, end_position)

            output_fn(InputFeatures(
                unique_id=unique_id, example_index=example_index, doc_span_index=doc_span_index,
                tokens=tokens, token_to_orig_map=token_to_orig_map,
                token_is_max_context=token_is_max_context, input_ids=input_ids,
                input_mask=input_mask, segment_ids=segment_ids, start_position=start_position,
                end_position=end_position, is_impossible=example.is_impossible))
            unique_id += 1
    if num_truncated_queries:
        logging.info("%d of %d questions were longer than max_query_length=%d sub-tokens and were "
                     "truncated", num_truncated_queries, len(examples), max_query_length)
    return unique_id - 1000000000


def _log_feature(unique_id, example_index, doc_span_index, tokens, token_to_orig_map,
                 token_is_max_context, input_ids, input_mask, segment_ids, is_training,
                 is_impossible, start_position, end_position):
    logging.info("*** Example ***")
    logging.info("unique_id: %s", unique_id)
    logging.info("example_index: %s", example_index)
    logging.info("doc_span_index: %s", doc_span_index)
    logging.info("tokens: %s", " ".join(tokenization.printable_text(x) for x in tokens))
    logging.info("token_to_orig_map: %s",
                 " ".join("%d:%d" % (x, y) for x, y in token_to_orig_map.items()))
    logging.info("token_is_max_context: %s",
                 " ".join("%d:%s" % (x, y) for x, y in token_is_max_context.items()))
    logging.info("input_ids: %s", " ".join(str(x) for x in input_ids))
    logging.info("input_mask: %s", " ".join(str(x) for x in input_mask))
    logging.info("segment_ids: %s", " ".join(str(x) for x in segment_ids))
    if is_training and is_impossible:
        logging.info("impossible example")
    if is_training and not is_impossible:
        answer_text = " ".join(tokens[start_position:(end_position + 1)])
        logging.info("start_position: %d", start_position)
        logging.info("end_position: %d", end_position)
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


def get_final_text(pred_text, orig_text, do_lower_case, verbose_logging=False):
    """Projects the normalized predicted text back onto the original text span.

    Aligns `orig_text` run through BasicTokenizer with `orig_text` character by character
    (spaces removed); when the alignment fails, returns `orig_text` as the original does.
    """
    tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    tok_text = " ".join(tokenizer.tokenize(orig_text))
    return _align_final_text(pred_text, orig_text, tok_text, verbose_logging)


class _WordTokenCache(object):
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

    orig_start_position = None
    if start_position in tok_s_to_ns_map:
        ns_start_position = tok_s_to_ns_map[start_position]
        if ns_start_position in orig_ns_to_s_map:
            orig_start_position = orig_ns_to_s_map[ns_start_position]
    if orig_start_position is None:
        if verbose_logging:
            logging.info("Couldn't map start position")
        return orig_text

    orig_end_position = None
    if end_position in tok_s_to_ns_map:
        ns_end_position = tok_s_to_ns_map[end_position]
        if ns_end_position in orig_ns_to_s_map:
            orig_end_position = orig_ns_to_s_map[ns_end_position]
    if orig_end_position is None:
        if verbose_logging:
            logging.info("Couldn't map end position")
        return orig_text

    return orig_text[orig_start_position:(orig_end_position + 1)]


def compute_predictions(all_examples, all_features, all_results, n_best_size, max_answer_length,
                        do_lower_case, version_2_with_negative=False,
                        null_score_diff_threshold=0.0, verbose_logging=False):
    """N-best decoding of start/end logits, as the original write_predictions.

    Returns (predictions, nbest, null score diffs) as ordered dicts keyed by question id; the
    third is empty unless `version_2_with_negative`.
    """
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

    for example_index, example in enumerate(all_examples):
        features = example_index_to_features[example_index]
        prelim_predictions = []
        # The minimum null score ([CLS] start + end) over the example's windows.
        score_null = 1000000
        min_null_feature_index = 0
        null_start_logit = 0
        null_end_logit = 0
        for feature_index, feature in enumerate(features):
            result = unique_id_to_result[feature.unique_id]
            start_indexes = _get_best_indexes(result.start_logits, n_best_size)
            end_indexes = _get_best_indexes(result.end_logits, n_best_size)
            if version_2_with_negative:
                feature_null_score = result.start_logits[0] + result.end_logits[0]
                if feature_null_score < score_null:
                    score_null = feature_null_score
                    min_null_feature_index = feature_index
                    null_start_logit = result.start_logits[0]
                    null_end_logit = result.end_logits[0]
            num_tokens = len(feature.tokens)
            for start_index in start_indexes:
                for end_index in end_indexes:
                    # Drop spans in the question or padding, outside the max context, reversed
                    # or too long.
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
                feature_index=min_null_feature_index, start_index=0, end_index=0,
                start_logit=null_start_logit, end_logit=null_end_logit))
        prelim_predictions = sorted(prelim_predictions,
                                    key=lambda x: (x.start_logit + x.end_logit), reverse=True)

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
                orig_text = " ".join(orig_tokens)
                final_text = _align_final_text(tok_text, orig_text, word_tokens.tok_text(orig_tokens),
                                               verbose_logging)
                if final_text in seen_predictions:
                    continue
                seen_predictions[final_text] = True
            else:
                final_text = ""
                seen_predictions[final_text] = True
            nbest.append(_NbestPrediction(text=final_text, start_logit=pred.start_logit,
                                          end_logit=pred.end_logit))

        if version_2_with_negative and "" not in seen_predictions:
            nbest.append(_NbestPrediction(text="", start_logit=null_start_logit,
                                          end_logit=null_end_logit))
        # In rare cases there is no valid span (e.g. an empty context): the original's nonce.
        if not nbest:
            logging.warning("question %s: no valid answer span; predicting \"empty\" as the "
                            "original does", example.qas_id)
            nbest.append(_NbestPrediction(text="empty", start_logit=0.0, end_logit=0.0))

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

        if not version_2_with_negative:
            all_predictions[example.qas_id] = nbest_json[0]["text"]
        elif best_non_null_entry is None:
            # Only the null answer survived (the original fails here): predict "" with the null
            # score as its score difference, as tf-models-official does.
            logging.warning("question %s: no valid non-null answer span; predicting \"\"",
                            example.qas_id)
            scores_diff_json[example.qas_id] = score_null
            all_predictions[example.qas_id] = ""
        else:
            # Predict "" iff the null score minus the best non-null score exceeds the threshold.
            score_diff = (score_null - best_non_null_entry.start_logit
                          - best_non_null_entry.end_logit)
            scores_diff_json[example.qas_id] = score_diff
            if score_diff > null_score_diff_threshold:
                all_predictions[example.qas_id] = ""
            else:
                all_predictions[example.qas_id] = best_non_null_entry.text
        all_nbest_json[example.qas_id] = nbest_json
    return all_predictions, all_nbest_json, scores_diff_json


def write_predictions(all_examples, all_features, all_results, n_best_size, max_answer_length,
                      do_lower_case, output_prediction_file, output_nbest_file,
                      output_null_log_odds_file, version_2_with_negative=False,
                      null_score_diff_threshold=0.0, verbose_logging=False):
    """Writes predictions.json, nbest_predictions.json and (2.0) null_odds.json."""
    logging.info("Writing predictions to: %s", output_prediction_file)
    logging.info("Writing nbest to: %s", output_nbest_file)
    predictions, nbest, scores_diff = compute_predictions(
        all_examples, all_features, all_results, n_best_size, max_answer_length, do_lower_case,
        version_2_with_negative, null_score_diff_threshold, verbose_logging)
    _write_json(output_prediction_file, predictions)
    _write_json(output_nbest_file, nbest)
    if version_2_with_negative:
        _write_json(output_null_log_odds_file, scores_diff)
    return predictions, nbest, scores_diff


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as writer:
        writer.write(json.dumps(obj, indent=4) + "\n")


# ---------------------------------------------------------------- TFRecords and input


class FeatureWriter(object):
    """Writes InputFeatures to a TFRecord file of tf.train.Example, as the original."""

    def __init__(self, filename, is_training):
        self.filename = filename
        self.is_training = is_training
        self.num_features = 0
        self._writer = tf.io.TFRecordWriter(filename)

    def process_feature(self, feature):
        self.num_features += 1

        def int_feature(values):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

        features = collections.OrderedDict()
        features["unique_ids"] = int_feature([feature.unique_id])
        features["input_ids"] = int_feature(feature.input_ids)
        features["input_mask"] = int_feature(feature.input_mask)
        features["segment_ids"] = int_feature(feature.segment_ids)
        if self.is_training:
            features["start_positions"] = int_feature([feature.start_position])
            features["end_positions"] = int_feature([feature.end_position])
            features["is_impossible"] = int_feature([1 if feature.is_impossible else 0])
        example = tf.train.Example(features=tf.train.Features(feature=features))
        self._writer.write(example.SerializeToString())

    def close(self):
        self._writer.close()


def input_fn_builder(input_file, seq_length, is_training, drop_remainder, seed=None):
    """An input function for training.py: (per-replica batch size, input context) -> tf.data.Dataset.

    Training repeats and shuffles with a buffer of 100, as the original; features are int32.
    """
    name_to_features = {
        "unique_ids": tf.io.FixedLenFeature([], tf.int64),
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
    }
    if is_training:
        name_to_features["start_positions"] = tf.io.FixedLenFeature([], tf.int64)
        name_to_features["end_positions"] = tf.io.FixedLenFeature([], tf.int64)

    def decode(record):
        example = tf.io.parse_single_example(record, name_to_features)
        return {name: tf.cast(t, tf.int32) for name, t in example.items()}

    def input_fn(batch_size, input_context=None):
        d = tf.data.TFRecordDataset(input_file)
        if input_context is not None and input_context.num_input_pipelines > 1:
            d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if is_training:
            d = d.repeat()
            d = d.shuffle(buffer_size=100, seed=seed)
        d = d.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        d = d.batch(batch_size, drop_remainder=drop_remainder)
        return d.prefetch(tf.data.AUTOTUNE)

    return input_fn


# ---------------------------------------------------------------- model and task


class SquadHead(modeling.NamedLayer):
    """"cls/squad/output_weights" [2, hidden] (truncated normal 0.02) and "output_bias" [2]."""

    def __init__(self, hidden_size, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range

    def build(self, input_shape=None):
        self.output_weights = self.add_named_weight(
            "output_weights", (2, self.hidden_size), modeling.create_initializer(0.02))
        self.output_bias = self.add_named_weight("output_bias", (2,), "zeros", autocast=False)
        self.built = True

    def call(self, final_hidden):
        """[batch, seq, hidden] -> float32 (start_logits, end_logits), each [batch, seq]."""
        batch_size = tf.shape(final_hidden)[0]
        seq_length = tf.shape(final_hidden)[1]
        final_hidden_matrix = tf.reshape(tf.cast(final_hidden, self.compute_dtype),
                                         [batch_size * seq_length, self.hidden_size])
        logits = tf.matmul(final_hidden_matrix, tf.cast(self.output_weights, self.compute_dtype),
                           transpose_b=True)
        logits = tf.nn.bias_add(tf.cast(logits, tf.float32), self.output_bias)
        logits = tf.reshape(logits, [batch_size, seq_length, 2])
        return logits[:, :, 0], logits[:, :, 1]


class SquadModel(keras.Model):
    """BertModel + the original SQuAD head; call(features) -> (start_logits, end_logits)."""

    def __init__(self, bert_config, name="squad", **kwargs):
        super().__init__(name=name, **kwargs)
        self.bert_config = bert_config
        self.bert = modeling.BertModel(bert_config, name="bert")
        self.head = SquadHead(bert_config.hidden_size, name="cls_squad")
        self.head.build()

    def variables_by_name(self):
        out = self.bert.variables_by_name()
        for name, variable in self.head.variables_by_name().items():
            out["cls/squad/" + name] = variable
        return out

    def call(self, features, training=False):
        outputs = self.bert(features["input_ids"], features["input_mask"], features["segment_ids"],
                            training=training)
        return self.head(outputs["sequence_output"])


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

    def __init__(self, bert_config):
        self.bert_config = bert_config

    def build_model(self):
        model = SquadModel(self.bert_config)
        dummy = tf.zeros([1, 2], tf.int32)
        model({"input_ids": dummy, "input_mask": dummy, "segment_ids": dummy})
        return model

    def compute_loss(self, model, features, training):
        start_logits, end_logits = model(features, training=training)
        loss = squad_loss(start_logits, end_logits, features["start_positions"],
                          features["end_positions"])
        return loss, {"loss": loss}

    def predict_outputs(self, model, features):
        start_logits, end_logits = model(features, training=False)
        return {"unique_ids": features["unique_ids"], "start_logits": start_logits,
                "end_logits": end_logits}


# ---------------------------------------------------------------- in-graph packing


def pack_squad_inputs(tokenizer, questions, contexts, max_seq_length, doc_stride, max_query_length,
                      cls_id, sep_id):
    """Windows of (question, context) string pairs, in-graph, equal to convert_examples_to_features.

    `tokenizer` is a tokenization.FastBertTokenizer. The context is split on the reader's whitespace
    and every word is tokenized on its own, as the original does. Returns a dict of tensors with
    one row per window: example_index, doc_span_index [K] int32; input_ids, input_mask,
    segment_ids, token_to_orig (context word index, -1 elsewhere) [K, max_seq_length] int32;
    token_is_max_context [K, max_seq_length] bool.
    """
    questions = tf.convert_to_tensor(questions, tf.string)
    contexts = tf.convert_to_tensor(contexts, tf.string)
    query = tokenizer.tokenize(questions)[:, :max_query_length]
    query_len = query.row_lengths()

    spaced = tf.strings.regex_replace(contexts, r"[\t\r\n\x{202F}]", " ")
    words = tf.strings.split(spaced, sep=" ")
    words = tf.ragged.boolean_mask(words, tf.strings.length(words) > 0)
    pieces = tokenizer.tokenize(words.flat_values)  # [total words, (pieces)]
    doc_splits = tf.gather(pieces.row_splits, words.row_splits)
    doc_ids = pieces.flat_values
    # Index of each piece's word within its own context.
    piece_word = pieces.value_rowids()
    piece_example = tf.ragged.row_splits_to_segment_ids(doc_splits, out_type=tf.int64)
    piece_word = piece_word - tf.gather(words.row_splits, piece_example)

    num_tokens = doc_splits[1:] - doc_splits[:-1]
    max_tokens = max_seq_length - query_len - 3
    step = tf.minimum(max_tokens, doc_stride)
    extra = tf.maximum(num_tokens - max_tokens, 0)
    num_spans = tf.where(num_tokens == 0, tf.zeros_like(num_tokens), (extra + step - 1) // step + 1)

    span_example = tf.repeat(tf.range(tf.size(num_spans, out_type=tf.int64)), num_spans)
    span_ranges = tf.ragged.range(num_spans)
    span_index = span_ranges.flat_values
    span_step = tf.gather(step, span_example)
    span_start = span_index * span_step
    span_length = tf.minimum(tf.gather(max_tokens, span_example),
                             tf.gather(num_tokens, span_example) - span_start)
    span_query_len = tf.gather(query_len, span_example)

    positions = tf.range(max_seq_length, dtype=tf.int64)[tf.newaxis, :]
    q_len = span_query_len[:, tf.newaxis]
    doc_offset = q_len + 2
    length = span_length[:, tf.newaxis]
    is_query = (positions >= 1) & (positions <= q_len)
    is_doc = (positions >= doc_offset) & (positions < doc_offset + length)
    is_last_sep = positions == doc_offset + length

    query_dense = query.to_tensor(default_value=0, shape=[None, max_query_length])
    query_rows = tf.gather(query_dense, span_example)
    query_pos = tf.clip_by_value(positions - 1, 0, max_query_length - 1)
    query_tokens = tf.gather(query_rows, tf.broadcast_to(query_pos, tf.shape(is_query)), batch_dims=1)

    doc_pos = span_start[:, tf.newaxis] + positions - doc_offset
    flat_pos = tf.gather(doc_splits, span_example)[:, tf.newaxis] + doc_pos
    flat_pos = tf.where(is_doc, flat_pos, tf.zeros_like(flat_pos))
    doc_tokens = tf.gather(doc_ids, flat_pos)
    doc_words = tf.gather(piece_word, flat_pos)

    zeros = tf.zeros_like(is_doc, tf.int64)
    input_ids = tf.where(positions == 0, tf.cast(cls_id, tf.int64), zeros)
    input_ids = tf.where(is_query, query_tokens, input_ids)
    input_ids = tf.where((positions == q_len + 1) | is_last_sep, tf.cast(sep_id, tf.int64), input_ids)
    input_ids = tf.where(is_doc, doc_tokens, input_ids)
    input_mask = positions <= doc_offset + length
    segment_ids = is_doc | is_last_sep
    token_to_orig = tf.where(is_doc, doc_words, -tf.ones_like(doc_words))

    # Max context: among the example's windows holding the token, the first with the best score
    # min(left, right) + 0.01 * length.
    starts = tf.RaggedTensor.from_row_splits(span_start, span_ranges.row_splits).to_tensor(-1)
    lengths = tf.RaggedTensor.from_row_splits(span_length, span_ranges.row_splits).to_tensor(0)
    w_start = tf.gather(starts, span_example)[:, tf.newaxis, :]
    w_length = tf.gather(lengths, span_example)[:, tf.newaxis, :]
    w_end = w_start + w_length - 1
    token = doc_pos[:, :, tf.newaxis]
    contains = (w_length > 0) & (token >= w_start) & (token <= w_end)
    score = (tf.cast(tf.minimum(token - w_start, w_end - token), tf.float64)
             + 0.01 * tf.cast(w_length, tf.float64))
    score = tf.where(contains, score, tf.constant(-1e9, tf.float64))
    best_score = tf.reduce_max(score, axis=-1, keepdims=True)
    window_ids = tf.range(tf.shape(score, out_type=tf.int64)[-1])
    best_window = tf.reduce_min(
        tf.where(contains & (score == best_score), window_ids, tf.int64.max), axis=-1)
    token_is_max_context = is_doc & (best_window == span_index[:, tf.newaxis])

    return {
        "example_index": tf.cast(span_example, tf.int32),
        "doc_span_index": tf.cast(span_index, tf.int32),
        "input_ids": tf.cast(input_ids, tf.int32),
        "input_mask": tf.cast(input_mask, tf.int32),
        "segment_ids": tf.cast(segment_ids, tf.int32),
        "token_to_orig": tf.cast(token_to_orig, tf.int32),
        "token_is_max_context": token_is_max_context,
    }


def features_from_packed(packed, vocab, base_unique_id=1000000000):
    """InputFeatures (as convert_examples_to_features makes them) from pack_squad_inputs' numpy
    outputs; `vocab` maps ids to tokens (FullTokenizer.inv_vocab)."""
    features = []
    for k in range(len(packed["example_index"])):
        mask = packed["input_mask"][k]
        n = int(mask.sum())
        ids = [int(x) for x in packed["input_ids"][k]]
        orig = packed["token_to_orig"][k]
        context = [i for i in range(n) if orig[i] >= 0]
        features.append(InputFeatures(
            unique_id=base_unique_id + k, example_index=int(packed["example_index"][k]),
            doc_span_index=int(packed["doc_span_index"][k]), tokens=[vocab[i] for i in ids[:n]],
            token_to_orig_map={i: int(orig[i]) for i in context},
            token_is_max_context={i: bool(packed["token_is_max_context"][k][i]) for i in context},
            input_ids=ids, input_mask=[int(x) for x in mask],
            segment_ids=[int(x) for x in packed["segment_ids"][k]]))
    return features


# ---------------------------------------------------------------- SavedModel


SERVING_TEXT = "serving_text"


class SquadExport(tf.Module):
    """What the SavedModel holds: the model, and with a vocabulary the in-graph tokenizer.

    serving_default(input_ids, input_mask, segment_ids: int32 [batch, seq]) returns
    {"start_logits", "end_logits": float32 [batch, seq]}. serving_text(question, context: string
    [batch]) windows the pairs exactly as convert_examples_to_features and returns, per window,
    the logits with example_index, doc_span_index, input_ids, input_mask, segment_ids,
    token_to_orig and token_is_max_context; decode_text_outputs turns them into answers.
    """

    def __init__(self, model, vocab_file=None, do_lower_case=True, max_seq_length=384,
                 doc_stride=128, max_query_length=64):
        super().__init__(name="squad_export")
        # The layers, not the keras.Model: saving a Model adds Keras's own float32 signature.
        self.bert = model.bert
        self.head = model.head
        spec = tf.TensorSpec([None, None], tf.int32)
        self.serve = tf.function(self._serve, input_signature=[spec] * 3)
        self.serve_text = None
        if vocab_file:
            if max_seq_length <= max_query_length + 3:
                raise ValueError("max_seq_length (%d) must be greater than max_query_length (%d) + 3"
                                 % (max_seq_length, max_query_length))
            vocab = tokenization.load_vocab(vocab_file)
            for token in ("[CLS]", "[SEP]"):
                if token not in vocab:
                    raise ValueError("vocab_file %s has no %s token" % (vocab_file, token))
            self.tokenizer = fast_tokenization.FastBertTokenizer(vocab_file, do_lower_case)
            self.cls_id, self.sep_id = vocab["[CLS]"], vocab["[SEP]"]
            self.packing = (max_seq_length, doc_stride, max_query_length)
            self.packing_config = tf.constant(list(self.packing), tf.int32)
            self.do_lower_case = tf.constant(do_lower_case)
            text = tf.TensorSpec([None], tf.string)
            self.serve_text = tf.function(self._serve_text, input_signature=[text, text])

    def _logits(self, input_ids, input_mask, segment_ids):
        outputs = self.bert(input_ids, input_mask, segment_ids, training=False)
        return self.head(outputs["sequence_output"])

    def _serve(self, input_ids, input_mask, segment_ids):
        start_logits, end_logits = self._logits(input_ids, input_mask, segment_ids)
        return {"start_logits": start_logits, "end_logits": end_logits}

    def _serve_text(self, question, context):
        max_seq_length, doc_stride, max_query_length = self.packing
        packed = pack_squad_inputs(self.tokenizer, question, context, max_seq_length, doc_stride,
                                   max_query_length, self.cls_id, self.sep_id)
        packed["start_logits"], packed["end_logits"] = self._logits(
            packed["input_ids"], packed["input_mask"], packed["segment_ids"])
        return packed


def export_saved_model(export_dir, bert_config, checkpoint_path, vocab_file=None,
                       do_lower_case=True, max_seq_length=384, doc_stride=128,
                       max_query_length=64):
    """Writes a SavedModel with the weights of `checkpoint_path`: serving_default on token ids and,
    given `vocab_file`, serving_text on (question, context) strings.

    Loading it needs TensorFlow and `import tensorflow_text` (for the tokenizer's ops).
    """
    with training.float32_policy():
        model = SquadTask(bert_config).build_model()
        checkpoints.init_from_checkpoint(model.variables_by_name(), checkpoint_path)
        module = SquadExport(model, vocab_file, do_lower_case, max_seq_length, doc_stride,
                             max_query_length)
        signatures = {"serving_default": module.serve.get_concrete_function()}
        if module.serve_text is not None:
            signatures[SERVING_TEXT] = module.serve_text.get_concrete_function()
        tf.saved_model.save(module, export_dir, signatures=signatures)
    logging.info("Exported %s to %s (signatures: %s)", checkpoint_path, export_dir,
                 ", ".join(signatures))
    return export_dir


def decode_text_outputs(questions, contexts, outputs, inv_vocab, do_lower_case=True,
                        n_best_size=20, max_answer_length=30, version_2_with_negative=False,
                        null_score_diff_threshold=0.0, qas_ids=None):
    """Answers from serving_text outputs (numpy arrays), with the original's n-best decoding.

    Returns (predictions, nbest, null score diffs) keyed by `qas_ids` (default "0", "1", ...).
    """
    qas_ids = qas_ids or [str(i) for i in range(len(questions))]
    examples = [SquadExample(qas_id=qid, question_text=question,
                             doc_tokens=split_context(context)[0])
                for qid, question, context in zip(qas_ids, questions, contexts)]
    features = features_from_packed(outputs, inv_vocab)
    results = [RawResult(f.unique_id, [float(x) for x in outputs["start_logits"][k]],
                         [float(x) for x in outputs["end_logits"][k]])
               for k, f in enumerate(features)]
    return compute_predictions(examples, features, results, n_best_size, max_answer_length,
                               do_lower_case, version_2_with_negative, null_score_diff_threshold)



# ---------------------------------------------------------------- runner


def validate_flags_or_throw(bert_config, do_train, do_predict, train_file, predict_file,
                            max_seq_length, max_query_length, export_dir=None):
    """The original's checks; errors name the flag."""
    if not do_train and not do_predict and not export_dir:
        raise ValueError("At least one of `do_train`, `do_predict` or `export_dir` must be set.")
    if do_train and not train_file:
        raise ValueError("If `do_train` is True, then `train_file` must be specified.")
    if do_predict and not predict_file:
        raise ValueError("If `do_predict` is True, then `predict_file` must be specified.")
    if max_seq_length > bert_config.max_position_embeddings:
        raise ValueError("Cannot use sequence length %d because the BERT model was only trained up to "
                         "sequence length %d" % (max_seq_length, bert_config.max_position_embeddings))
    if max_seq_length <= max_query_length + 3:
        raise ValueError("The max_seq_length (%d) must be greater than max_query_length (%d) + 3"
                         % (max_seq_length, max_query_length))


def _has_gold_answers(input_file):
    data = load_squad_json(input_file)
    qas = [qa for entry in data for p in entry.get("paragraphs", []) for qa in p.get("qas", [])]
    return bool(qas) and all(isinstance(qa, dict) and "answers" in qa for qa in qas)


def predict_features(task, features_file, config, strategy, seq_length, num_features):
    """Runs the model over eval.tf_record; returns RawResults in feature order."""
    input_fn = input_fn_builder(features_file, seq_length, is_training=False, drop_remainder=False)
    all_results = []
    for result in training.predict(task, input_fn, config, strategy):
        if len(all_results) % 1000 == 0:
            logging.info("Processing example: %d", len(all_results))
        all_results.append(RawResult(
            unique_id=int(result["unique_ids"]),
            start_logits=[float(x) for x in result["start_logits"].flat],
            end_logits=[float(x) for x in result["end_logits"].flat]))
    if len(all_results) != num_features:
        raise RuntimeError("%s: the model returned %d results for %d features"
                           % (features_file, len(all_results), num_features))
    return all_results


def run(config, vocab_file, train_file=None, predict_file=None, do_lower_case=True,
        max_seq_length=384, doc_stride=128, max_query_length=64, do_train=False, do_predict=False,
        num_train_epochs=3.0, warmup_proportion=0.1, n_best_size=20, max_answer_length=30,
        verbose_logging=False, version_2_with_negative=False, null_score_diff_threshold=0.0,
        train_first_answer=False, export_dir=None):
    """The whole job; `config` is a training.TrainingConfig (output_dir, bert_config_file, ...).

    Returns {"train": ..., "predictions": ..., "eval": ..., "export": ...} for what ran.
    """
    for flag, value in (("bert_config_file", config.bert_config_file), ("vocab_file", vocab_file),
                        ("output_dir", config.output_dir)):
        if not value:
            raise ValueError("--%s is required" % flag)
    tokenization.validate_case_matches_checkpoint(do_lower_case, config.init_checkpoint)
    bert_config = modeling.BertConfig.from_json_file(config.bert_config_file)
    validate_flags_or_throw(bert_config, do_train, do_predict, train_file, predict_file,
                            max_seq_length, max_query_length, export_dir)
    tf.io.gfile.makedirs(config.output_dir)
    tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)
    task = SquadTask(bert_config)
    strategy = training.create_strategy(config)
    results = {}

    if do_train:
        train_examples = read_squad_examples(train_file, is_training=True,
                                             version_2_with_negative=version_2_with_negative,
                                             train_first_answer=train_first_answer)
        num_train_steps, num_warmup_steps = training.num_train_steps_for(
            len(train_examples), config.train_batch_size, num_train_epochs, warmup_proportion)
        config = dataclasses.replace(config, num_train_steps=num_train_steps,
                                     num_warmup_steps=num_warmup_steps)
        # Pre-shuffle the examples so that a small shuffle buffer suffices, as the original.
        random.Random(12345).shuffle(train_examples)
        train_writer = FeatureWriter(os.path.join(config.output_dir, "train.tf_record"),
                                     is_training=True)
        convert_examples_to_features(train_examples, tokenizer, max_seq_length, doc_stride,
                                     max_query_length, True, train_writer.process_feature)
        train_writer.close()
        logging.info("***** Running training *****")
        logging.info("  Num orig examples = %d", len(train_examples))
        logging.info("  Num split examples = %d", train_writer.num_features)
        logging.info("  Batch size = %d", config.train_batch_size)
        logging.info("  Num steps = %d", num_train_steps)
        del train_examples
        input_fn = input_fn_builder(train_writer.filename, max_seq_length, is_training=True,
                                    drop_remainder=True, seed=config.seed)
        results["train"] = training.train(task, input_fn, config, strategy)

    if do_predict:
        eval_examples = read_squad_examples(predict_file, is_training=False)
        eval_writer = FeatureWriter(os.path.join(config.output_dir, "eval.tf_record"),
                                    is_training=False)
        eval_features = []

        def append_feature(feature):
            eval_features.append(feature)
            eval_writer.process_feature(feature)

        convert_examples_to_features(eval_examples, tokenizer, max_seq_length, doc_stride,
                                     max_query_length, False, append_feature)
        eval_writer.close()
        logging.info("***** Running predictions *****")
        logging.info("  Num orig examples = %d", len(eval_examples))
        logging.info("  Num split examples = %d", len(eval_features))
        logging.info("  Batch size = %d", config.predict_batch_size)
        all_results = predict_features(task, eval_writer.filename, config, strategy,
                                       max_seq_length, len(eval_features))
        output_prediction_file = os.path.join(config.output_dir, "predictions.json")
        output_nbest_file = os.path.join(config.output_dir, "nbest_predictions.json")
        output_null_log_odds_file = os.path.join(config.output_dir, "null_odds.json")
        predictions, _, _ = write_predictions(
            eval_examples, eval_features, all_results, n_best_size, max_answer_length,
            do_lower_case, output_prediction_file, output_nbest_file, output_null_log_odds_file,
            version_2_with_negative, null_score_diff_threshold, verbose_logging)
        results["predictions"] = predictions
        if _has_gold_answers(predict_file):
            # Score the predictions as the official script would (with null_odds.json for 2.0).
            try:
                result, text = squad_evaluation.run(
                    predict_file, output_prediction_file, version="2.0" if version_2_with_negative
                    else "auto", na_prob_file=output_null_log_odds_file if version_2_with_negative
                    else None)
            except squad_evaluation.SquadEvaluationError as e:
                logging.warning("Predictions written, but %s cannot be scored: %s", predict_file, e)
            else:
                with open(os.path.join(config.output_dir, "eval_results.json"), "w") as writer:
                    writer.write(text + "\n")
                logging.info("***** Eval results (official SQuAD metrics) *****\n%s", text)
                results["eval"] = result

    if export_dir:
        results["export"] = export_saved_model(
            export_dir, bert_config,
            checkpoints.checkpoint_for_inference(config.output_dir, config.init_checkpoint), vocab_file,
            do_lower_case, max_seq_length, doc_stride, max_query_length)
    return results


def define_flags():
    """The original's flags (shared ones from training.py) plus export and train_first_answer."""
    training.define_training_flags(train_batch_size=32, predict_batch_size=8, learning_rate=5e-5,
                                   save_checkpoints_steps=1000, iterations_per_loop=1000)
    flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
    flags.DEFINE_string("train_file", None, "SQuAD json for training. E.g., train-v1.1.json")
    flags.DEFINE_string("predict_file", None,
                        "SQuAD json for predictions. E.g., dev-v1.1.json or test-v1.1.json")
    flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True "
                      "for uncased models and False for cased models.")
    flags.DEFINE_integer("max_seq_length", 384, "The maximum total input sequence length after "
                         "WordPiece tokenization. Longer sequences are truncated, shorter padded.")
    flags.DEFINE_integer("doc_stride", 128, "When splitting up a long document into chunks, how "
                         "much stride to take between chunks.")
    flags.DEFINE_integer("max_query_length", 64, "The maximum number of tokens for the question. "
                         "Questions longer than this will be truncated to this length.")
    flags.DEFINE_bool("do_train", False, "Whether to run training.")
    flags.DEFINE_bool("do_predict", False, "Whether to run eval on the dev set.")
    flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
    flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training to perform linear learning "
                       "rate warmup for. E.g., 0.1 = 10% of training.")
    flags.DEFINE_integer("n_best_size", 20, "The total number of n-best predictions to generate in "
                         "the nbest_predictions.json output file.")
    flags.DEFINE_integer("max_answer_length", 30, "The maximum length of an answer that can be "
                         "generated. This is needed because the start and end predictions are not "
                         "conditioned on one another.")
    flags.DEFINE_bool("verbose_logging", False, "If true, all of the warnings related to data "
                      "processing will be printed. A number of warnings are expected for a normal "
                      "SQuAD evaluation.")
    flags.DEFINE_bool("version_2_with_negative", False,
                      "If true, the SQuAD examples contain some that do not have an answer.")
    flags.DEFINE_float("null_score_diff_threshold", 0.0, "If null_score - best_non_null is greater "
                       "than the threshold predict null.")
    flags.DEFINE_bool("train_first_answer", False, "Train on the first answer of questions that "
                      "have several (the original requires exactly one answer per training "
                      "question, as in train-v1.1.json).")
    flags.DEFINE_string("export_dir", None, "Write a SavedModel here from the newest checkpoint in "
                        "output_dir, else init_checkpoint: serving_default (input_ids, input_mask, "
                        "segment_ids -> start_logits, end_logits) and serving_text (question, "
                        "context strings -> windows and logits, packed as max_seq_length, "
                        "doc_stride and max_query_length say).")


def main(_):
    logging.set_verbosity(logging.INFO)
    run(training.TrainingConfig.from_flags(FLAGS), FLAGS.vocab_file, train_file=FLAGS.train_file,
        predict_file=FLAGS.predict_file, do_lower_case=FLAGS.do_lower_case,
        max_seq_length=FLAGS.max_seq_length, doc_stride=FLAGS.doc_stride,
        max_query_length=FLAGS.max_query_length, do_train=FLAGS.do_train,
        do_predict=FLAGS.do_predict, num_train_epochs=FLAGS.num_train_epochs,
        warmup_proportion=FLAGS.warmup_proportion, n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length, verbose_logging=FLAGS.verbose_logging,
        version_2_with_negative=FLAGS.version_2_with_negative,
        null_score_diff_threshold=FLAGS.null_score_diff_threshold,
        train_first_answer=FLAGS.train_first_answer, export_dir=FLAGS.export_dir)


if __name__ == "__main__":
    define_flags()
    flags.mark_flag_as_required("vocab_file")
    flags.mark_flag_as_required("bert_config_file")
    flags.mark_flag_as_required("output_dir")
    app.run(main)
