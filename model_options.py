"""The BERT model a script starts from, declared once: its config, vocabulary, casing, starting checkpoint and
sequence length (the original's flags), for every script and every exported model, and the checks of what they
name.

A script's options hold it as `model: ModelOptions = cli.nested(ModelOptions, ...)`, so its fields are the
script's flags under the original's names (a script may exclude some, require some, and give its own default and
help); serving.py's modules take it as it is. check() loads and checks the BERT config against --max_seq_length,
the vocabulary (its special tokens, its size against the config), the casing against a known checkpoint name and
against the casing recorded beside --init_checkpoint (tokenizer_config.json, written by convert_checkpoint.py), and
that --init_checkpoint exists: a cli.UserError names the flag or the file.
"""
import dataclasses

import checkpoints
import cli
import encoder
import filesystem
import tokenization


@dataclasses.dataclass
class ModelOptions:
    """The model's flags (the original's names and defaults)."""
    bert_config_file: str = cli.option(None, "The config json file corresponding to the pre-trained BERT model. "
                                       "This specifies the model architecture.")
    vocab_file: str = cli.option(None, "The vocabulary file that the BERT model was trained on.")
    do_lower_case: bool = cli.option(True, "Whether to lower case the input text. Should be True for uncased "
                                     "models and False for cased models.")
    init_checkpoint: str = cli.option(None, "Initial checkpoint (usually from a pre-trained BERT model).")
    max_seq_length: int = cli.option(128, "The maximum total input sequence length after WordPiece tokenization. "
                                     "Longer sequences are truncated, shorter ones padded.")

    def bert_config(self, min_seq_length=1):
        """The BertConfig of --bert_config_file, checked against --max_seq_length."""
        filesystem.require_file(self.bert_config_file, "--bert_config_file")
        bert_config = encoder.BertConfig.load(self.bert_config_file)
        check_seq_length(bert_config, self.max_seq_length, min_seq_length, self.bert_config_file)
        return bert_config

    def require(self, vocab=True):
        """The model's flags a job cannot do without are set: --bert_config_file, and --vocab_file with `vocab`."""
        if not self.bert_config_file:
            raise cli.UserError("--bert_config_file is required")
        if vocab and not self.vocab_file:
            raise cli.UserError("--vocab_file is required")

    def check(self, min_seq_length=3, special_tokens=("[CLS]", "[SEP]"), vocab=True):
        """Every check of the model's flags (require first): returns (BertConfig, FullTokenizer, or None without
        `vocab` and --vocab_file) or raises cli.UserError."""
        self.require(vocab)
        tokenization.validate_case_matches_checkpoint(self.do_lower_case, self.init_checkpoint)
        tokenization.check_recorded_casing(self.do_lower_case, self.init_checkpoint)
        bert_config = self.bert_config(min_seq_length)
        tokenizer = None
        if self.vocab_file:
            tokenizer = tokenization.FullTokenizer(vocab_file=self.vocab_file, do_lower_case=self.do_lower_case)
            tokenization.check_special_tokens(tokenizer.vocab, self.vocab_file, special_tokens)
            tokenization.check_vocab_size(self.vocab_file, bert_config.vocab_size)
        if self.init_checkpoint:
            checkpoints.resolve_checkpoint(self.init_checkpoint, flag="--init_checkpoint")
        return bert_config, tokenizer


def check_seq_length(bert_config, max_seq_length, min_seq_length=1, source="--bert_config_file"):
    """--max_seq_length must fit the model's position embeddings and hold min_seq_length tokens."""
    if max_seq_length > bert_config.max_position_embeddings:
        raise cli.UserError(f"--max_seq_length={max_seq_length}: cannot use sequence length {max_seq_length} "
                            f"because the BERT model was only trained up to sequence length "
                            f"{bert_config.max_position_embeddings} ({source})")
    if max_seq_length < min_seq_length:
        raise cli.UserError(f"--max_seq_length={max_seq_length}: expected at least {min_seq_length}")
