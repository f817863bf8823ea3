"""Converts BERT checkpoints between the original format, HF safetensors and tf-models-official, and writes
TF Hub's encoder + preprocessor SavedModels from an original-format one.

  python convert_checkpoint.py --mode=hf_to_original --hf_dir=HF_FOLDER --output_dir=OUT
      writes OUT/bert_model.ckpt.{index,data-00000-of-00001}, OUT/bert_config.json, OUT/vocab.txt and, where
      the HF folder says the casing (or --do_lower_case does), OUT/tokenizer_config.json: what the scripts and
      original_to_hf read of it
  python convert_checkpoint.py --mode=original_to_hf --init_checkpoint=CKPT_OR_DIR \\
      --bert_config_file=bert_config.json --vocab_file=vocab.txt [--do_lower_case=true|false] --output_dir=OUT
      writes OUT/config.json, OUT/model.safetensors, OUT/vocab.txt, OUT/tokenizer_config.json,
      OUT/special_tokens_map.json (transformers' AutoTokenizer and keras-hub's from_preset read them); the casing
      from --do_lower_case, else the tokenizer_config.json beside the checkpoint, else uncased for a vocabulary
      without upper-case entries (a cased one needs the flag)
Each writes its folder all at once (nothing is left of a failed conversion) and refuses a folder that already
holds its files.
  python convert_checkpoint.py --mode=tfm_to_original --init_checkpoint=TFM_CKPT_OR_DIR [--vocab_file=...] \
      [--hidden_act=gelu] --output_dir=OUT
      writes OUT/bert_model.ckpt.*, OUT/bert_config.json (+ OUT/vocab.txt) from a Model Garden BertEncoder
  python convert_checkpoint.py --mode=original_to_tfhub --init_checkpoint=CKPT_OR_DIR \
      --bert_config_file=bert_config.json --vocab_file=vocab.txt [--do_lower_case=true|false] --output_dir=OUT
      writes OUT/encoder and OUT/preprocessor, TF Hub's SavedModels for text (tfhub_export.py); the casing as
      for original_to_hf
  python convert_checkpoint.py --mode=original_to_onnx|original_to_tflite --init_checkpoint=CKPT_OR_DIR \
      --bert_config_file=bert_config.json [--quantize] --output_dir=OUT
      writes OUT/encoder.onnx (ONNX Runtime; needs tf2onnx) or OUT/encoder.tflite (LiteRT): the encoder alone,
      int32 input_ids, input_mask, segment_ids [batch, sequence] -> sequence_output, pooled_output; --quantize:
      int8 (onnx_export.py, litert_export.py)
"""
import dataclasses

from absl import logging

import cli  # before conversions: quiets TensorFlow's start-up logging
import conversions
import filesystem
import litert_export
import onnx_export
import serving
import tfhub_export

MODES = ("hf_to_original", "original_to_hf", "tfm_to_original", "original_to_tfhub", "original_to_onnx",
         "original_to_tflite")
ENCODER_FILES = {"original_to_onnx": "encoder.onnx", "original_to_tflite": "encoder.tflite"}


@dataclasses.dataclass
class ConvertOptions:
    """convert_checkpoint.py's flags."""
    mode: str = cli.option(None, "Conversion direction.", MODES, required=True)
    hf_dir: str = cli.option(None, "HF folder with config.json, model.safetensors, vocab.txt (hf_to_original).")
    init_checkpoint: str = cli.option(None, "Checkpoint prefix or directory: original (original_to_hf, "
                                      "original_to_tfhub) or "
                                      "tf-models-official (tfm_to_original).")
    bert_config_file: str = cli.option(None, "bert_config.json of the original checkpoint (original_to_hf, "
                                       "original_to_tfhub).")
    vocab_file: str = cli.option(None, "vocab.txt (original_to_hf, original_to_tfhub; optional for hf_to_original).")
    output_dir: str = cli.option(None, "Folder to write the converted model to.", required=True)
    do_lower_case: bool = cli.option(None, "The model's casing, for the tokenizer files (original_to_hf), the "
                                     "preprocessor (original_to_tfhub) or recorded beside the checkpoint "
                                     "(hf_to_original): true for an uncased model, false for a cased one. Not "
                                     "given: what the source records, else uncased for a vocabulary without "
                                     "upper-case entries (a cased one needs the flag).")
    hidden_act: str = cli.option("gelu", "Activation of a tf-models-official encoder (tfm_to_original).")
    quantize: bool = cli.option(False, "int8 (original_to_onnx: ONNX Runtime's dynamic quantization; "
                                "original_to_tflite: dynamic-range int8).")


def run(options):
    """Runs one conversion (ConvertOptions); returns what it wrote (checkpoint prefix or HF folder)."""
    if options.mode == "hf_to_original":
        if not options.hf_dir:
            raise cli.UserError("--hf_dir is required for --mode=hf_to_original")
        written = conversions.hf_to_original(options.hf_dir, options.output_dir, vocab_file=options.vocab_file,
                                             do_lower_case=options.do_lower_case)
    elif options.mode == "original_to_hf":
        missing = [name for name, value in (("--init_checkpoint", options.init_checkpoint),
                                            ("--bert_config_file", options.bert_config_file),
                                            ("--vocab_file", options.vocab_file)) if not value]
        if missing:
            raise cli.UserError(f"{', '.join(missing)} required for --mode=original_to_hf")
        written = conversions.original_to_hf(options.init_checkpoint, options.bert_config_file, options.vocab_file,
                                             options.output_dir, do_lower_case=options.do_lower_case)
    elif options.mode == "tfm_to_original":
        if not options.init_checkpoint:
            raise cli.UserError("--init_checkpoint is required for --mode=tfm_to_original")
        written = conversions.tfm_to_original(options.init_checkpoint, options.output_dir,
                                              vocab_file=options.vocab_file, hidden_act=options.hidden_act)
    elif options.mode == "original_to_tfhub":
        written = tfhub_export.export(options.init_checkpoint, options.bert_config_file, options.vocab_file,
                                      options.do_lower_case, options.output_dir)
    elif options.mode in ENCODER_FILES:
        written = export_encoder(options)
    else:
        raise cli.UserError(f"--mode must be one of {MODES}, got {options.mode!r}")
    logging.info("Done: %s", written)
    return written


def export_encoder(options):
    """original_to_onnx / original_to_tflite: the encoder's ONNX or LiteRT model in --output_dir; returns its path."""
    missing = [name for name, value in (("--init_checkpoint", options.init_checkpoint),
                                        ("--bert_config_file", options.bert_config_file)) if not value]
    if missing:
        raise cli.UserError(f"{', '.join(missing)} required for --mode={options.mode}")
    onnx = options.mode == "original_to_onnx"
    if onnx:
        onnx_export.require_converter("--mode=original_to_onnx", quantize=options.quantize)
    path = filesystem.normpath(options.output_dir).rstrip("/") + "/" + ENCODER_FILES[options.mode]
    if filesystem.exists(path):
        raise cli.UserError(f"--output_dir={options.output_dir} already holds an export ({ENCODER_FILES[options.mode]})"
                            f": give an empty or new folder")
    module = serving.encoder_module(options.init_checkpoint, options.bert_config_file)
    if onnx:
        return onnx_export.export(path, module, "--output_dir", quantize=options.quantize)
    return litert_export.export(path, module, quantize=options.quantize, flag="--output_dir")


if __name__ == "__main__":
    cli.main(ConvertOptions, run)
