"""Procedures of the original release, transcribed as oracles for the tests: run_classifier's packing of a pair,
run_squad's sliding windows and its max-context rule, run_pretraining's loss over modeling's original API."""
import tensorflow as tf

import modeling


def original_packing(tokens_a, tokens_b, max_seq_length):
    """The original run_classifier.py's convert_single_example layout, as an oracle: a pair truncated by
    popping from the longer (b on ties) to max_seq_length - 3, a single sequence cut to max_seq_length - 2."""
    tokens_a, tokens_b = list(tokens_a), list(tokens_b or [])
    if tokens_b:
        while len(tokens_a) + len(tokens_b) > max_seq_length - 3:
            (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()
    else:
        tokens_a = tokens_a[:max_seq_length - 2]
    tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + (tokens_b + ["[SEP]"] if tokens_b else [])
    segments = [0] * (len(tokens_a) + 2) + ([1] * (len(tokens_b) + 1) if tokens_b else [])
    padding = [0] * (max_seq_length - len(tokens))
    return tokens, segments + padding


def original_doc_spans(num_doc_tokens, max_tokens_for_doc, doc_stride):
    """The original run_squad.py's sliding windows (start, length), as an oracle."""
    doc_spans = []
    start_offset = 0
    while start_offset < num_doc_tokens:
        length = min(num_doc_tokens - start_offset, max_tokens_for_doc)
        doc_spans.append((start_offset, length))
        if start_offset + length == num_doc_tokens:
            break
        start_offset += min(length, doc_stride)
    return doc_spans


def original_is_max_context(doc_spans, cur_span_index, position):
    """The original's _check_is_max_context, as an oracle."""
    best_score, best_span_index = None, None
    for span_index, (start, length) in enumerate(doc_spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_span_index = score, span_index
    return cur_span_index == best_span_index


def gather_indexes(sequence_tensor, positions):
    """run_pretraining.gather_indexes, as a user's code has it."""
    batch_size, seq_length, width = modeling.get_shape_list(sequence_tensor, expected_rank=3)
    flat_offsets = tf.reshape(tf.range(0, batch_size, dtype=tf.int32) * seq_length, [-1, 1])
    flat_positions = tf.reshape(positions + flat_offsets, [-1])
    flat_sequence_tensor = tf.reshape(sequence_tensor, [batch_size * seq_length, width])
    return tf.gather(flat_sequence_tensor, flat_positions)


def pretraining_loss(bert_config, features):
    """The original run_pretraining.py's model_fn loss, written for TensorFlow 2 with modeling's stand-ins for
    tf.variable_scope / tf.layers.dense / tf.get_variable."""
    model = modeling.BertModel(config=bert_config, is_training=True, input_ids=features["input_ids"],
                               input_mask=features["input_mask"], token_type_ids=features["segment_ids"])
    input_tensor = gather_indexes(model.get_sequence_output(), features["masked_lm_positions"])
    with tf.compat.v1.variable_scope("cls/predictions"):
        with tf.compat.v1.variable_scope("transform"):
            input_tensor = modeling.dense(input_tensor, bert_config.hidden_size,
                                          activation=modeling.get_activation(bert_config.hidden_act),
                                          initializer_range=bert_config.initializer_range)
            input_tensor = modeling.layer_norm(input_tensor)
        output_bias = modeling.get_variable("output_bias", shape=[bert_config.vocab_size],
                                            initializer=tf.zeros_initializer())
        logits = tf.matmul(input_tensor, model.get_embedding_table(), transpose_b=True)
        log_probs = tf.nn.log_softmax(tf.nn.bias_add(logits, output_bias), axis=-1)
        label_ids = tf.reshape(features["masked_lm_ids"], [-1])
        label_weights = tf.reshape(features["masked_lm_weights"], [-1])
        one_hot_labels = tf.one_hot(label_ids, depth=bert_config.vocab_size, dtype=tf.float32)
        per_example_loss = -tf.reduce_sum(log_probs * one_hot_labels, axis=[-1])
        masked_lm_loss = tf.reduce_sum(label_weights * per_example_loss) / (tf.reduce_sum(label_weights) + 1e-5)
    with tf.compat.v1.variable_scope("cls/seq_relationship"):
        output_weights = modeling.get_variable("output_weights", shape=[2, bert_config.hidden_size],
                                               initializer=modeling.create_initializer(bert_config.initializer_range))
        output_bias = modeling.get_variable("output_bias", shape=[2], initializer=tf.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(model.get_pooled_output(), output_weights, transpose_b=True), output_bias)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        labels = tf.reshape(features["next_sentence_labels"], [-1])
        one_hot_labels = tf.one_hot(labels, depth=2, dtype=tf.float32)
        next_sentence_loss = tf.reduce_mean(-tf.reduce_sum(one_hot_labels * log_probs, axis=-1))
    return masked_lm_loss + next_sentence_loss
