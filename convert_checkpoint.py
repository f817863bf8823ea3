"""Converts BERT checkpoints between the original format, HF safetensors and tf-models-official.

  python convert_checkpoint.py --mode=hf_to_original --hf_dir=HF_FOLDER --output_dir=OUT
      writes OUT/bert_model.ckpt.{index,data-00000-of-00001}, OUT/bert_config.json, OUT/vocab.txt
  python convert_checkpoint.py --mode=original_to_hf --init_checkpoint=CKPT_OR_DIR \\
      --bert_config_file=bert_config.json --vocab_file=vocab.txt --output_dir=OUT
      writes OUT/config.json, OUT/model.safetensors, OUT/vocab.txt
  python convert_checkpoint.py --mode=tfm_to_original --init_checkpoint=TFM_CKPT_OR_DIR [--vocab_file=...] \
      [--hidden_act=gelu] --output_dir=OUT
      writes OUT/bert_model.ckpt.*, OUT/bert_config.json (+ OUT/vocab.txt) from a Model Garden BertEncoder
"""
from absl import flags
from absl import logging

import cli  # before conversions: quiets TensorFlow's start-up logging
import conversions

MODES = ("hf_to_original", "original_to_hf", "tfm_to_original")
FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_enum("mode", None, list(MODES), "Conversion direction.")
    flags.DEFINE_string("hf_dir", None, "HF folder with config.json, model.safetensors, vocab.txt (hf_to_original).")
    flags.DEFINE_string("init_checkpoint", None,
                        "Checkpoint prefix or directory: original (original_to_hf) or tf-models-official "
                        "(tfm_to_original).")
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the original checkpoint (original_to_hf).")
    flags.DEFINE_string("vocab_file", None, "vocab.txt (original_to_hf; optional for hf_to_original).")
    flags.DEFINE_string("output_dir", None, "Folder to write the converted model to.")
    flags.DEFINE_string("hidden_act", "gelu", "Activation of a tf-models-official encoder (tfm_to_original).")
    flags.mark_flags_as_required(["mode", "output_dir"])


def convert(mode, output_dir, hf_dir=None, init_checkpoint=None, bert_config_file=None, vocab_file=None,
            hidden_act="gelu"):
    """Runs one conversion; returns what it wrote (checkpoint prefix or HF folder)."""
    if mode == "hf_to_original":
        if not hf_dir:
            raise cli.UserError("--hf_dir is required for --mode=hf_to_original")
        return conversions.hf_to_original(hf_dir, output_dir, vocab_file=vocab_file)
    if mode == "original_to_hf":
        missing = [name for name, value in (("--init_checkpoint", init_checkpoint),
                                            ("--bert_config_file", bert_config_file),
                                            ("--vocab_file", vocab_file)) if not value]
        if missing:
            raise cli.UserError(f"{', '.join(missing)} required for --mode=original_to_hf")
        return conversions.original_to_hf(init_checkpoint, bert_config_file, vocab_file, output_dir)
    if mode == "tfm_to_original":
        if not init_checkpoint:
            raise cli.UserError("--init_checkpoint is required for --mode=tfm_to_original")
        return conversions.tfm_to_original(init_checkpoint, output_dir, vocab_file=vocab_file, hidden_act=hidden_act)
    raise cli.UserError(f"--mode must be one of {MODES}, got {mode!r}")


def main(_):
    written = convert(FLAGS.mode, FLAGS.output_dir, hf_dir=FLAGS.hf_dir, init_checkpoint=FLAGS.init_checkpoint,
                      bert_config_file=FLAGS.bert_config_file, vocab_file=FLAGS.vocab_file,
                      hidden_act=FLAGS.hidden_act)
    logging.info("Done: %s", written)


if __name__ == "__main__":
    define_flags()
    cli.run(main)
