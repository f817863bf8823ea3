"""Run masked LM / next sentence masked_lm pre-training for BERT (flags and meanings of the original).

Added to the original: every flag of training.TrainingConfig (distribution strategy, XLA, bfloat16 /
float16, LAMB, gradient accumulation, ...) and --dynamic_masking (fresh masks drawn per step with
tensorflow-text instead of the static masks stored in the records).

Bad input: --input_file files without a single record are an error before training (files without records
beside others are skipped with a warning). A corrupt or truncated record stops training or evaluation with an
error naming the file and the record; the checkpoints written so far are kept, so fixing or removing the file
and running the same command again resumes from the last one.

The original's Python API (model_fn_builder, get_masked_lm_output, get_next_sentence_output, gather_indexes,
input_fn_builder) is kept, over PretrainingModel's heads and pretraining_input_fn (docs/original_code.md, "Your
code written for the original").
"""
import cli  # first: quiets TensorFlow's start-up logging

import dataclasses
import json

import tensorflow as tf
from absl import logging

import encoder
import filesystem
import modeling
import original_model_fn
import records
import runner
import tokenization
import training
from model_options import ModelOptions
from training import TrainingConfig

FEATURE_NAMES = records.names(records.pretraining(None, None))


@dataclasses.dataclass
class PretrainingOptions:
    """run_pretraining.py's flags: the original's, the model's (ModelOptions: no --do_lower_case, and --vocab_file
    only for --dynamic_masking), the loop's (training.TrainingConfig) and --dynamic_masking."""
    model: ModelOptions = cli.nested(ModelOptions, exclude=("do_lower_case",), required=("bert_config_file",),
                                     help_texts={
        "max_seq_length": "The maximum total input sequence length after WordPiece tokenization. Sequences longer "
                          "than this will be truncated, and sequences shorter than this will be padded. Must match "
                          "data generation.",
        "vocab_file": "Vocabulary of the records (for --dynamic_masking)."})
    input_file: str = cli.option(None, "Input TF example files (can be a glob or comma separated).", required=True)
    max_predictions_per_seq: int = cli.option(20, "Maximum number of masked LM predictions per sequence. Must "
                                              "match data generation.")
    do_train: bool = cli.option(False, "Whether to run training.")
    do_eval: bool = cli.option(False, "Whether to run eval on the dev set.")
    max_eval_steps: int = cli.option(100, "Maximum number of eval steps.")
    dynamic_masking: bool = cli.option(False, "Draw new masks for every training batch (tensorflow-text) instead "
                                       "of using the masks stored in the records. Needs --vocab_file.")
    masked_lm_prob: float = cli.option(0.15, "Masked LM probability for --dynamic_masking.")
    training: TrainingConfig = cli.nested(TrainingConfig, required=("output_dir",))


# ---------------------------------------------------------------------------------------------------------
# Input pipeline.


# The flag that sets each feature's length (next_sentence_labels: always one value).
FLAG_OF_FEATURE = {"input_ids": "--max_seq_length", "input_mask": "--max_seq_length",
                   "segment_ids": "--max_seq_length", "masked_lm_positions": "--max_predictions_per_seq",
                   "masked_lm_ids": "--max_predictions_per_seq", "masked_lm_weights": "--max_predictions_per_seq",
                   "next_sentence_labels": None}


def unmask_input_ids(features):
    """input_ids with the original tokens put back at the stored masked positions (batched features)."""
    input_ids = features["input_ids"]
    positions = features["masked_lm_positions"]
    weights = features["masked_lm_weights"]
    batch = tf.shape(input_ids)[0]
    rows = tf.broadcast_to(tf.range(batch)[:, None], tf.shape(positions))
    keep = weights > 0
    indices = tf.stack([tf.boolean_mask(rows, keep), tf.boolean_mask(positions, keep)], axis=1)
    return tf.tensor_scatter_nd_update(input_ids, indices, tf.boolean_mask(features["masked_lm_ids"], keep))


class DynamicMasker:
    """Draws new masked-LM positions per batch with tensorflow-text (80% [MASK], 10% random, 10% kept)."""

    def __init__(self, vocab_file, vocab_size, max_predictions_per_seq, masked_lm_prob=0.15):
        if not vocab_file:
            raise cli.UserError("--dynamic_masking needs --vocab_file (to find [MASK], [CLS] and [SEP])")
        vocab = tokenization.load_vocab(vocab_file)
        tokenization.check_special_tokens(vocab, vocab_file, ("[MASK]", "[CLS]", "[SEP]", "[PAD]"))
        if not 0.0 < masked_lm_prob < 1.0:
            raise cli.UserError(f"--masked_lm_prob={masked_lm_prob}: expected a probability in (0, 1)")
        self.mask_id = vocab["[MASK]"]
        self.unselectable = [vocab["[CLS]"], vocab["[SEP]"], vocab["[PAD]"]]
        self.vocab_size = vocab_size
        self.max_predictions_per_seq = max_predictions_per_seq
        self.masked_lm_prob = masked_lm_prob

    def __call__(self, features):
        import tensorflow_text as text
        original = unmask_input_ids(features)
        lengths = tf.reduce_sum(features["input_mask"], axis=1)
        ragged = tf.RaggedTensor.from_tensor(original, lengths=lengths)
        selector = text.RandomItemSelector(self.max_predictions_per_seq, self.masked_lm_prob,
                                           unselectable_ids=self.unselectable)
        chooser = text.MaskValuesChooser(self.vocab_size, self.mask_id, 0.8, 0.1)
        masked, positions, ids = text.mask_language_model(ragged, selector, chooser)
        width = original.shape[1]
        if width is None:
            raise ValueError("dynamic masking needs input_ids with a static sequence length")
        out = dict(features)
        out["input_ids"] = masked.to_tensor(default_value=0, shape=[None, width])
        p = self.max_predictions_per_seq
        out["masked_lm_positions"] = positions.to_tensor(default_value=0, shape=[None, p])
        out["masked_lm_ids"] = ids.to_tensor(default_value=0, shape=[None, p])
        out["masked_lm_weights"] = tf.cast(tf.ones_like(ids, tf.float32).to_tensor(0.0, shape=[None, p]),
                                           tf.float32)
        return out


NUM_CPU_THREADS = 4  # files read at once when training (the original input_fn_builder's num_cpu_threads)


def pretraining_input_fn(input_files, record_format, is_training, seed=12345, masker=None,
                         num_cpu_threads=NUM_CPU_THREADS):
    """Returns input_fn(batch_size, input_context) -> dataset of feature dicts (training.py's contract) over the
    records of `record_format` (records.pretraining(max_seq_length, max_predictions_per_seq)).

    Training: files shuffled and repeated, records interleaved from several files and shuffled (buffer 100,
    as the original), full batches only; every step is deterministic given `seed`. Workers read disjoint file
    shards when there are at least as many files as input pipelines; otherwise every worker builds the same
    global batches and takes its slice. Eval: one deterministic pass in file order, last batch kept.
    """
    holding = [path for path in input_files if records.check_first_record(path, record_format, FLAG_OF_FEATURE)]
    if not holding:
        raise cli.UserError(f"--input_file: no records in {', '.join(input_files)}")
    input_files = holding

    def decode(record):
        return records.decode(record, record_format)

    def input_fn(batch_size, input_context=None):
        pipelines = input_context.num_input_pipelines if input_context else 1
        pipeline_id = input_context.input_pipeline_id if input_context else 0
        replicas = input_context.num_replicas_in_sync if input_context else 1
        if not is_training:
            dataset = tf.data.TFRecordDataset(input_files)
            if pipelines > 1:
                dataset = dataset.shard(pipelines, pipeline_id)
            return dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size).prefetch(2)
        files = list(input_files)
        shard_files = pipelines > 1 and len(files) >= pipelines
        dataset = tf.data.Dataset.from_tensor_slices(tf.constant(files))
        if shard_files:
            dataset = dataset.shard(pipelines, pipeline_id)
            files = files[pipeline_id::pipelines]
        dataset = dataset.repeat().shuffle(len(files), seed=seed)
        cycle_length = min(num_cpu_threads, len(files))
        dataset = dataset.interleave(tf.data.TFRecordDataset, cycle_length=cycle_length,
                                     num_parallel_calls=cycle_length, deterministic=True)
        dataset = dataset.shuffle(100, seed=seed + 1)
        dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if pipelines > 1 and not shard_files:
            global_batch = batch_size * replicas
            part = global_batch // pipelines
            dataset = dataset.batch(global_batch, drop_remainder=True)
            dataset = dataset.map(lambda b: {k: v[pipeline_id * part:(pipeline_id + 1) * part]
                                             for k, v in b.items()})
            dataset = dataset.unbatch()
        dataset = dataset.batch(batch_size, drop_remainder=True)
        if masker is not None:
            dataset = dataset.map(masker)
        return dataset.prefetch(tf.data.AUTOTUNE)

    return input_fn


# ---------------------------------------------------------------------------------------------------------
# The task.


class PretrainingTask(training.Task):
    """Masked LM + next sentence prediction with the original heads, losses and eval metrics.

    Training normalises the masked-LM loss by the masked-token weight of the whole step (all micro-batches
    and replicas), so gradient accumulation and data parallelism give the gradient of the global batch;
    on one device without accumulation that is exactly the original loss.
    """

    def __init__(self, bert_config):
        self.bert_config = bert_config

    def build_model(self, elementwise_dtype="float32"):
        return encoder.PretrainingModel(self.bert_config, elementwise_dtype=elementwise_dtype)

    def prepare_batch(self, features, num_micro_batches):
        context = tf.distribute.get_replica_context()
        weight_sum = tf.reduce_sum(tf.cast(features["masked_lm_weights"], tf.float32))
        replicas = 1
        if context is not None and context.num_replicas_in_sync > 1:
            replicas = context.num_replicas_in_sync
            weight_sum = context.all_reduce(tf.distribute.ReduceOp.SUM, weight_sum)
        out = dict(features)
        out["mlm_weight_total"] = weight_sum
        out["mlm_num_parts"] = tf.constant(float(num_micro_batches * replicas))
        return out

    def _losses(self, outputs, features):
        if "mlm_weight_total" not in features:
            return outputs["mlm_loss"], outputs["nsp_loss"]
        weights = tf.reshape(tf.cast(features["masked_lm_weights"], tf.float32), [-1])
        numerator = tf.reduce_sum(weights * outputs["mlm_example_loss"])
        mlm_loss = numerator * features["mlm_num_parts"] / (features["mlm_weight_total"] + 1e-5)
        return mlm_loss, outputs["nsp_loss"]

    def compute_loss(self, model, features, training, dropout_seed=None):
        inputs = {name: features[name] for name in FEATURE_NAMES}
        outputs = model(inputs, training=training, dropout_seed=dropout_seed)
        mlm_loss, nsp_loss = self._losses(outputs, features)
        total = mlm_loss + nsp_loss
        return total, {"loss": total, "masked_lm_loss": mlm_loss, "next_sentence_loss": nsp_loss}

    def evaluate_batch(self, model, features):
        outputs = model({name: features[name] for name in FEATURE_NAMES}, training=False)
        weights = tf.reshape(tf.cast(features["masked_lm_weights"], tf.float32), [-1])
        mlm_ids = tf.reshape(tf.cast(features["masked_lm_ids"], tf.int32), [-1])
        mlm_pred = tf.argmax(outputs["mlm_log_probs"], axis=-1, output_type=tf.int32)
        nsp_labels = tf.reshape(tf.cast(features["next_sentence_labels"], tf.int32), [-1])
        nsp_pred = tf.argmax(outputs["nsp_log_probs"], axis=-1, output_type=tf.int32)
        count = tf.cast(tf.size(nsp_labels), tf.float32)
        metrics = {
            "masked_lm_accuracy": (tf.reduce_sum(weights * tf.cast(tf.equal(mlm_ids, mlm_pred), tf.float32)),
                                   tf.reduce_sum(weights)),
            "masked_lm_loss": (tf.reduce_sum(weights * outputs["mlm_example_loss"]), tf.reduce_sum(weights)),
            "next_sentence_accuracy": (tf.reduce_sum(tf.cast(tf.equal(nsp_labels, nsp_pred), tf.float32)),
                                       count),
            "next_sentence_loss": (tf.reduce_sum(outputs["nsp_example_loss"]), count),
        }
        return outputs["total_loss"], metrics

    def predict_outputs(self, model, features):
        outputs = model({name: features[name] for name in FEATURE_NAMES}, training=False)
        batch = tf.shape(features["input_ids"])[0]
        return {"mlm_log_probs": tf.reshape(outputs["mlm_log_probs"], [batch, -1, tf.shape(
                    outputs["mlm_log_probs"])[-1]]),
                "nsp_log_probs": outputs["nsp_log_probs"]}


# ---------------------------------------------------------------------------------------------------------
# The original's model_fn_builder, heads and input_fn_builder, on TensorFlow 2 (modeling's original API): the
# layers of PretrainingModel (encoder.MaskedLMHead, NextSentenceHead) and its losses, with modeling's variables.


def _original_head(scope, bert_config, make):
    """The head layer make() at `scope` under the current tf.compat.v1.variable_scope, its variables modeling's
    (`<scope>/...`, made once per name), as the original's tf.variable_scope(scope) made them."""
    full = encoder.join_names(tf.compat.v1.get_variable_scope().name, scope)
    key = (scope, json.dumps(bert_config.to_dict(), sort_keys=True, default=repr), modeling.elementwise_dtype())
    return modeling.namespace_layer(full, key, make, None)


def gather_indexes(sequence_tensor, positions):
    """Gathers the vectors at the specific positions over a minibatch: sequence_tensor [batch_size, seq_length,
    width], positions [batch_size, num_positions] -> [batch_size * num_positions, width]."""
    return encoder.gather_indexes(sequence_tensor, positions)


def get_masked_lm_output(bert_config, input_tensor, output_weights, positions, label_ids, label_weights):
    """Get loss and log probs for the masked LM: (loss, per_example_loss [batch_size * num_positions], log_probs
    [batch_size * num_positions, vocab_size]) of the head `cls/predictions` (transform/dense, transform/LayerNorm,
    output_bias; the decoder is output_weights, the word embeddings) at `positions` of input_tensor (the
    sequence output), the loss weighted by label_weights."""
    head = _original_head("cls/predictions", bert_config,
                          lambda: encoder.MaskedLMHead(bert_config, modeling.elementwise_dtype(), name="predictions"))
    log_probs = head(gather_indexes(input_tensor, positions), output_weights)
    loss, per_example_loss = encoder.masked_lm_loss(log_probs, label_ids, label_weights)
    return loss, per_example_loss, log_probs


def get_next_sentence_output(bert_config, input_tensor, labels):
    """Get loss and log probs for the next sentence prediction: (loss, per_example_loss [batch_size], log_probs
    [batch_size, 2]) of the head `cls/seq_relationship` (output_weights [2, hidden_size], output_bias [2]) on
    input_tensor (the pooled output); label 0 is "next sentence", 1 "random sentence"."""
    head = _original_head("cls/seq_relationship", bert_config,
                          lambda: encoder.NextSentenceHead(bert_config, name="seq_relationship"))
    log_probs = head(input_tensor)
    loss, per_example_loss = encoder.next_sentence_loss(log_probs, labels)
    return loss, per_example_loss, log_probs


def _original_outputs(bert_config, features, is_training, use_one_hot_embeddings):
    """The original model_fn's model and heads on a batch of pre-training features."""
    model = modeling.BertModel(config=bert_config, is_training=is_training, input_ids=features["input_ids"],
                               input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
                               use_one_hot_embeddings=use_one_hot_embeddings)
    masked_lm = get_masked_lm_output(bert_config, model.get_sequence_output(), model.get_embedding_table(),
                                     features["masked_lm_positions"], features["masked_lm_ids"],
                                     features["masked_lm_weights"])
    next_sentence = get_next_sentence_output(bert_config, model.get_pooled_output(),
                                             features["next_sentence_labels"])
    return masked_lm[0] + next_sentence[0], masked_lm, next_sentence


def model_fn_builder(bert_config, init_checkpoint, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings):
    """The original's model_fn_builder. TensorFlow 2.16+ has no tf.estimator to run a model_fn: call the model_fn
    it returns yourself, eagerly or in a tf.function, `model_fn(features, labels=None, mode, params=None)` on a
    batch of pre-training features (input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids,
    masked_lm_weights, next_sentence_labels) -> modeling.EstimatorSpec with loss, the original's total loss
    (masked LM + next sentence), and:
      mode TRAIN: train_op, a function: train_op() runs one step of optimization.create_optimizer on this batch
        (one optimizer for every call of this builder's model_fn, as the original's graph had one) and returns
        the loss;
      mode EVAL: predictions, what the original's metric_fn reads: masked_lm_example_loss, masked_lm_log_probs,
        next_sentence_example_loss, next_sentence_log_probs (PretrainingTask.evaluate_batch and run_pretraining.py
        --do_eval compute the metrics).
    Its first call loads init_checkpoint into modeling's variables by the assignment map, as the original's did
    (original_model_fn). Any other mode is the original's ValueError."""
    loader = original_model_fn.CheckpointLoader(init_checkpoint)

    def outputs(features, is_training):
        return _original_outputs(bert_config, features, is_training, use_one_hot_embeddings)

    train_op = original_model_fn.TrainOp(lambda features: outputs(features, True)[0], learning_rate,
                                         num_train_steps, num_warmup_steps, use_tpu)

    def model_fn(features, labels=None, mode=modeling.ModeKeys.EVAL, params=None):
        if mode not in (modeling.ModeKeys.TRAIN, modeling.ModeKeys.EVAL):
            raise ValueError("Only TRAIN and EVAL modes are supported: %s" % (mode))
        is_training = mode == modeling.ModeKeys.TRAIN
        total_loss, masked_lm, next_sentence = original_model_fn.load_once(loader,
                                                                           lambda: outputs(features, is_training))
        if is_training:
            return modeling.EstimatorSpec(mode=mode, predictions=None, loss=total_loss,
                                          train_op=train_op.for_batch(features))
        predictions = {"masked_lm_example_loss": masked_lm[1], "masked_lm_log_probs": masked_lm[2],
                       "next_sentence_example_loss": next_sentence[1], "next_sentence_log_probs": next_sentence[2]}
        return modeling.EstimatorSpec(mode=mode, predictions=predictions, loss=total_loss, train_op=None)

    return model_fn


def input_fn_builder(input_files, max_seq_length, max_predictions_per_seq, is_training, num_cpu_threads=4):
    """The original's `input_fn(params)` over pre-training records (input_files: a list of files, any file
    system): input_fn({"batch_size": n}) is a tf.data.Dataset of batches of the seven int32 / float32 features
    (pretraining_input_fn, this script's own): when training, files shuffled and repeated, num_cpu_threads of
    them read at once, records shuffled in a buffer of 100, whole batches only; for evaluation one pass in file
    order, the last batch kept (the original repeated it for TPUEstimator's steps)."""
    make = pretraining_input_fn(list(input_files), records.pretraining(max_seq_length, max_predictions_per_seq),
                                is_training, num_cpu_threads=num_cpu_threads)
    return lambda params: make(params["batch_size"])


# ---------------------------------------------------------------------------------------------------------
# The job.


class Job(runner.Job):
    """One run_pretraining.py invocation on runner.Job's shape: train, then evaluate (on the chief, writing
    eval_results.txt with the original's keys)."""

    steps = (("train", "do_train", "train"), ("eval", "do_eval", "evaluate"))
    needs_vocab = False  # the records hold token ids; only --dynamic_masking reads the vocabulary
    needs_checkpoint = False  # evaluating random weights is allowed (logged), as the original

    def __init__(self, options):
        super().__init__(options)
        limit = self.model.max_seq_length
        if not 1 <= options.max_predictions_per_seq <= limit:
            raise cli.UserError(f"--max_predictions_per_seq={options.max_predictions_per_seq}: expected "
                                f"1..max_seq_length")
        self.task = PretrainingTask(self.bert_config)
        self.input_files = None

    def read_data(self):
        options = self.options
        self.input_files = filesystem.input_files(options.input_file, "--input_file")
        logging.info("*** Input Files ***")
        for name in self.input_files:
            logging.info("  %s", name)
        masker = None
        if options.do_train and options.dynamic_masking:
            masker = DynamicMasker(self.model.vocab_file, self.bert_config.vocab_size,
                                   options.max_predictions_per_seq, options.masked_lm_prob)
        self.train_input = pretraining_input_fn(self.input_files, self.record_format(), True,
                                                seed=self.config.seed, masker=masker)

    def record_format(self):
        """The pre-training records' format: --max_seq_length, --max_predictions_per_seq."""
        return records.pretraining(self.model.max_seq_length, self.options.max_predictions_per_seq)

    def train(self):
        logging.info("***** Running training *****")
        logging.info("  Batch size = %d", self.config.train_batch_size)
        return records.naming_corrupt_records(self.input_files, lambda: self.train_loop(self.train_input))

    def evaluate(self):
        logging.info("***** Running evaluation *****")
        logging.info("  Batch size = %d", self.config.eval_batch_size)
        input_fn = pretraining_input_fn(self.input_files, self.record_format(), False)
        checkpoint, _ = self.inference_checkpoint()
        results = records.naming_corrupt_records(self.input_files, lambda: training.evaluate(
            self.task, input_fn, self.config, self.inference_strategy, checkpoint, self.options.max_eval_steps))
        return self.write_results(runner.EVAL_RESULTS_FILE, results)


def run(options):
    """Trains and/or evaluates (PretrainingOptions); returns {"train": train result, "eval": eval results} for
    what ran."""
    return Job(options).run()


if __name__ == "__main__":
    cli.main(PretrainingOptions, run)
