"""What the scripts' original `model_fn_builder`s share: the original's model_fn contract on TensorFlow 2.

TensorFlow 2.16+ has no tf.estimator to call a model_fn, so a user calls it, eagerly or inside a tf.function, and
reads the modeling.EstimatorSpec it returns. Two things the Estimator did are done here, once for every script:

  load_once(init_checkpoint, build): the original's model_fn built the model, then tf.train.init_from_checkpoint
    set the initial values of the variables the checkpoint holds (once: the graph was built once). build() makes
    the model's variables and outputs; the first call of a builder's model_fn loads the checkpoint into
    modeling.trainable_variables() by get_assignment_map_from_checkpoint's map, and, eagerly, builds again so
    that its outputs come from the loaded weights (inside a tf.function they read the variables when it runs).
  TrainOp: the original's train_op, optimization.create_optimizer's step, made once per model_fn_builder (one
    optimizer, its moments and the global step carried from batch to batch, as in the original's one graph);
    spec.train_op() runs one step on the batch the model_fn was given and returns its loss.
"""
import functools

import tensorflow as tf

import modeling
import optimization


class CheckpointLoader:
    """Loads init_checkpoint (None: nothing) into modeling's trainable variables that it holds, on the first call
    only; a call returns whether it loaded."""

    def __init__(self, init_checkpoint):
        self.init_checkpoint = init_checkpoint
        self.loaded = None  # the checkpoint names loaded, once loaded

    def __call__(self):
        if not self.init_checkpoint or self.loaded is not None:
            return False
        with tf.init_scope():
            assignment_map, _ = modeling.get_assignment_map_from_checkpoint(modeling.trainable_variables(),
                                                                            self.init_checkpoint)
            self.loaded = modeling.init_from_checkpoint(self.init_checkpoint, assignment_map)
        return True


def load_once(loader, build):
    """build()'s outputs, with loader (a CheckpointLoader) run after the first build: eagerly, built again from
    the loaded weights."""
    outputs = build()
    if loader() and tf.executing_eagerly():
        outputs = build()
    return outputs


class TrainOp:
    """The train_op of a model_fn in TRAIN mode: `train_op = TrainOp(loss_fn, learning_rate, num_train_steps,
    num_warmup_steps, use_tpu)` once per model_fn_builder, `train_op.for_batch(features)` per model_fn call;
    loss_fn(features) computes the training loss (the model built with is_training=True)."""

    def __init__(self, loss_fn, learning_rate, num_train_steps, num_warmup_steps, use_tpu):
        self.loss_fn = loss_fn
        self.settings = (learning_rate, num_train_steps, num_warmup_steps, use_tpu)
        self.step = None  # optimization.create_optimizer's step, made at the first TRAIN call

    def for_batch(self, features):
        """A function of no arguments that runs one training step on `features` and returns the loss."""
        if self.step is None:
            self.step = optimization.create_optimizer(self.loss_fn, *self.settings)
        return functools.partial(self.step, features)
