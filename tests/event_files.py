"""What a training run wrote to TensorBoard, read back for the tests."""
import os

import tensorflow as tf


def summary_scalars(output_dir):
    """{tag: [(step, value), ...] in step order} of the scalars in output_dir's TensorBoard event files (what
    training._ProgressLog writes every --save_summary_steps: the means of the loss and other logs since the last,
    learning_rate, examples_per_sec, global_step/sec)."""
    out = {}
    for path in sorted(tf.io.gfile.glob(os.path.join(output_dir, "events.out.tfevents.*"))):
        for raw in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(raw.numpy())
            for value in event.summary.value:
                out.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return {tag: sorted(values) for tag, values in out.items()}
