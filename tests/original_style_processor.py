"""A user's own task processor, written the way the original release's README tells users to write one: a
run_classifier.DataProcessor subclass in the style of its MrpcProcessor, using only the original's API
(self._read_tsv, a list of field lists; tokenization.convert_to_unicode; run_classifier.InputExample).

It reads MRPC as a paraphrase task of its own, with its own label names. The same file runs against this project
(tests/test_original_api.py, in Python and through run_classifier.py --processor_class) and against the original
release's run_classifier.py (tests/reference/make_original_features.py), whose features it must give.
"""
import os

import run_classifier
import tokenization


class ParaphraseProcessor(run_classifier.DataProcessor):
    """Sentence pairs (columns 3 and 4 of MRPC's files), labelled "different" or "paraphrase" (column 0)."""

    names = {"0": "different", "1": "paraphrase"}

    def get_train_examples(self, data_dir):
        return self._create_examples(self._read_tsv(os.path.join(data_dir, "train.tsv")), "train")

    def get_dev_examples(self, data_dir):
        return self._create_examples(self._read_tsv(os.path.join(data_dir, "dev.tsv")), "dev")

    def get_test_examples(self, data_dir):
        return self._create_examples(self._read_tsv(os.path.join(data_dir, "test.tsv")), "test")

    def get_labels(self):
        return ["different", "paraphrase"]

    def _create_examples(self, lines, set_type):
        examples = []
        for (i, line) in enumerate(lines):
            if i == 0:  # the header
                continue
            guid = "%s-%d" % (set_type, i)
            text_a = tokenization.convert_to_unicode(line[3])
            text_b = tokenization.convert_to_unicode(line[4])
            if set_type == "test":
                label = "different"  # unlabelled: any label of the list
            else:
                label = self.names[tokenization.convert_to_unicode(line[0])]
            examples.append(run_classifier.InputExample(guid=guid, text_a=text_a, text_b=text_b, label=label))
        return examples
