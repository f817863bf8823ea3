"""What each TFRecord file of the project holds: every record format declared once, for its writer and reader.

A format is an ordered {feature name: (length, kind)}: `length` values per record (None: one value, read back
as a scalar), `kind` INT64 or FLOAT (tf.train.Example's int64_list / float_list). Writers write the features
in this order; readers parse exactly these (runner.decode_record). No TensorFlow here: create_pretraining_data.py
writes its records without it.
"""
import collections

INT64 = "int64"
FLOAT = "float"


def pretraining(max_seq_length, max_predictions_per_seq):
    """The original's pre-training records (create_pretraining_data.py -> run_pretraining.py)."""
    return collections.OrderedDict([
        ("input_ids", (max_seq_length, INT64)),
        ("input_mask", (max_seq_length, INT64)),
        ("segment_ids", (max_seq_length, INT64)),
        ("masked_lm_positions", (max_predictions_per_seq, INT64)),
        ("masked_lm_ids", (max_predictions_per_seq, INT64)),
        ("masked_lm_weights", (max_predictions_per_seq, FLOAT)),
        ("next_sentence_labels", (1, INT64)),
    ])


def classifier(max_seq_length, is_regression):
    """run_classifier.py's train/eval/predict.tf_record (a float label for regression)."""
    return collections.OrderedDict([
        ("input_ids", (max_seq_length, INT64)),
        ("input_mask", (max_seq_length, INT64)),
        ("segment_ids", (max_seq_length, INT64)),
        ("label_ids", (None, FLOAT if is_regression else INT64)),
        ("is_real_example", (None, INT64)),
    ])


def squad(max_seq_length, is_training):
    """run_squad.py's train.tf_record (with the answer) and eval.tf_record."""
    features = collections.OrderedDict([
        ("unique_ids", (None, INT64)),
        ("input_ids", (max_seq_length, INT64)),
        ("input_mask", (max_seq_length, INT64)),
        ("segment_ids", (max_seq_length, INT64)),
    ])
    if is_training:
        features.update([("start_positions", (None, INT64)), ("end_positions", (None, INT64)),
                         ("is_impossible", (None, INT64))])
    return features


def names(record_format):
    """The feature names of a format, in order."""
    return tuple(record_format)


def check(record_format, features, where):
    """Raises ValueError unless `features` ({name: values per record, or [records, values]}) are the format's,
    in its order."""
    if tuple(features) != names(record_format):
        raise ValueError(f"{where}: features {tuple(features)} are not the record format's {names(record_format)}")
