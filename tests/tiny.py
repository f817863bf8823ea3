"""The tiny BERT the tests train, export and serve: its config, random task checkpoints under the original names,
and the original release's tiny checkpoint in the shared data."""
import json
import os

from tests.shared_data import shared_path

# Two layers of 32 over the real uncased vocabulary, sequences up to 128; the rest BertConfig's defaults (16 token
# types, dropout 0.1, initializer_range 0.02), which a test changes where it needs to.
CONFIG = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
              max_position_embeddings=128)


def config(**overrides):
    """encoder.BertConfig of CONFIG with some values changed."""
    import encoder  # here, not at import: conftest.py loads this module, and pure-Python tests need no TensorFlow
    return encoder.BertConfig(**dict(CONFIG, **overrides))


def config_file(path, **overrides):
    """Writes config(**overrides) as a bert_config.json at path; returns the path as a string."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(dict(CONFIG, **overrides), f)
    return str(path)


def original_dir():
    """The original release's tiny checkpoint (model.ckpt-30, bert_config.json, reference_outputs.npz)."""
    return shared_path("reference", "original_checkpoint_tiny")


def original_config_file():
    return os.path.join(original_dir(), "bert_config.json")


def random_classifier(bert_config, num_labels=2, seed=7, scale=20.0, bias=None, is_regression=False):
    """A classifier with random weights drawn from `seed`; its output weights times `scale` (probabilities far
    apart from example to example) and its output bias `bias` when given."""
    import run_classifier
    import tensorflow as tf
    tf.keras.utils.set_random_seed(seed)
    model = run_classifier.ClassifierTask(bert_config, num_labels, is_regression).build_model()
    model.head.output_weights.assign(model.head.output_weights * scale)
    if bias is not None:
        model.head.output_bias.assign(bias)
    return model


def save(model, output_dir, step=0):
    """Saves the model's variables as output_dir/model.ckpt-STEP (a CheckpointManager's, as a job's output folder
    holds them); returns the prefix."""
    import checkpoints
    return checkpoints.CheckpointManager(str(output_dir)).save(model.variables_by_name(), step)


def pretraining_input_fn(masker=None, seed=5):
    """run_pretraining's training input over the original's sample text records (sequences of 128, 20
    predictions)."""
    import records
    import run_pretraining
    from tests.shared_data import pretraining_records
    return run_pretraining.pretraining_input_fn([pretraining_records()], records.pretraining(128, 20),
                                                is_training=True, seed=seed, masker=masker)


def pretraining_config(dropout=0.0):
    """A one-layer model of 32 (positions up to 512), dropout as given: what the training loop's tests train."""
    return config(num_hidden_layers=1, max_position_embeddings=512, hidden_dropout_prob=dropout,
                  attention_probs_dropout_prob=dropout)


def train_pretraining(output_dir, steps=3, masker=None, init_checkpoint=None, **kwargs):
    """training.train of pretraining_config() for `steps` steps of batch 32 at learning rate 1e-3, one loop, a
    checkpoint at the start and the end; kwargs: other TrainingConfig values. Returns train's results."""
    import run_pretraining
    import training
    values = dict(output_dir=str(output_dir), train_batch_size=32, learning_rate=1e-3, num_train_steps=steps,
                  num_warmup_steps=0, save_checkpoints_steps=100, iterations_per_loop=steps)
    values.update(kwargs)
    training_config = training.TrainingConfig(**values)
    return training.train(run_pretraining.PretrainingTask(pretraining_config()), pretraining_input_fn(masker),
                          training_config, training.create_strategy(training_config), init_checkpoint)


def mrpc_subset(folder, lines=40, dev_bytes=None):
    """The first `lines` lines (header included) of MRPC's train.tsv and dev.tsv in `folder`; dev.tsv replaced
    by dev_bytes when given. Returns the folder as a string."""
    from tests.shared_data import glue
    os.makedirs(folder, exist_ok=True)
    for name in ("train.tsv", "dev.tsv"):
        with open(os.path.join(glue("MRPC"), name), encoding="utf-8") as f:
            head = f.readlines()[:lines]
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.writelines(head)
    if dev_bytes is not None:
        with open(os.path.join(folder, "dev.tsv"), "wb") as f:
            f.write(dev_bytes)
    return str(folder)


def classifier_flags(tmp_path, **flags):
    """The command-line flags of run_classifier.py evaluating a one-layer model (tmp_path/bert_config.json) on an
    MRPC subset (tmp_path/mrpc), writing tmp_path/out; flags: other values (flat flags, strings)."""
    from tests.shared_data import vocab
    values = dict(task_name="MRPC", data_dir=mrpc_subset(tmp_path / "mrpc"), vocab_file=vocab(),
                  bert_config_file=config_file(tmp_path / "bert_config.json", num_hidden_layers=1, type_vocab_size=2),
                  output_dir=str(tmp_path / "out"), do_eval="true", max_seq_length="32")
    values.update(flags)
    return [f"--{name}={value}" for name, value in values.items()]


def pretraining_command(config_file, output_dir, steps, *flags, warmup=20):
    """run_pretraining.py's command line as a user types it, for the runs that the resume, preemption and progress
    tests compare: the model of config_file on the original's sample-text records, batch 8, `steps` steps (`warmup`
    of warm-up) at learning rate 1e-3, --deterministic; flags: the run's own (its cadence: checkpoints, loops,
    progress lines; a strategy), which change no result."""
    from tests.processes import script_command
    from tests.shared_data import pretraining_records
    return script_command("run_pretraining.py", f"--bert_config_file={config_file}",
                          f"--input_file={pretraining_records()}", f"--output_dir={output_dir}", "--do_train",
                          "--train_batch_size=8", f"--num_train_steps={steps}", f"--num_warmup_steps={warmup}",
                          "--learning_rate=1e-3", "--deterministic", *flags)


def original_names():
    """The variable names of the original's tiny checkpoint (its variable_names.json, made by the original code)."""
    with open(os.path.join(original_dir(), "variable_names.json"), encoding="utf-8") as f:
        return [name[:-2] for name in json.load(f)]  # without ":0"
