"""Pre-training records (create_pretraining_data's TFRecord files) read back for the tests."""
import numpy as np
import tensorflow as tf

import create_pretraining_data


def read_records(path):
    """Parsed feature values of a TFRecord file (TensorFlow's reader checks the CRCs): name -> [N, K] array."""
    columns = {name: [] for name in create_pretraining_data.FEATURE_NAMES}
    for raw in tf.data.TFRecordDataset(path):
        feature = tf.train.Example.FromString(raw.numpy()).features.feature
        for name in columns:
            if name == "masked_lm_weights":
                columns[name].append(list(feature[name].float_list.value))
            else:
                columns[name].append(list(feature[name].int64_list.value))
    return {name: np.array(values) for name, values in columns.items()}
