"""Exports the two training models of `cargo bench -p tessera --bench parallel` into the
git-ignored `testdata/models/large/train/`:

- `gpt2_small.onnx`: the GPT-2 class of `testdata/training/make_training_refs.py` at GPT-2
  small's sizes (12 layers, 768 wide, 12 heads, vocabulary 50257, output head tied to the
  token embedding), batch 8 x 64 tokens; the logits come out as `[8 * 64, 50257]`, one row
  per token, for cross-entropy against the next tokens;
- `bert_base.onnx`: Hugging Face's `BertForSequenceClassification` at BERT-base's sizes
  (12 layers, 768 wide, 12 heads, vocabulary 30522), two classes, batch 8 x 128 tokens:
  fine-tuning a sentence classifier, as on GLUE.

Both with random weights (a simulated step's time does not depend on them), exported by the
TorchScript exporter (opset 17, no constant folding, so every parameter stays an
initializer). Needs torch and transformers (a virtual environment):

    python3 -m venv /tmp/torch && /tmp/torch/bin/pip install torch transformers onnx
    /tmp/torch/bin/python benches/train/make_parallel_models.py
"""

import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "testdata", "training"))
import make_training_refs as refs  # noqa: E402

OUT = os.path.join(ROOT, "testdata", "models", "large", "train")


def export(model, ids, path, output):
    model.train()
    torch.onnx.export(model, (ids,), path, input_names=["input_ids"], output_names=[output],
                      opset_version=17, dynamo=False, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.PRESERVE)
    print("wrote", os.path.relpath(path, ROOT))


def main():
    from transformers import BertConfig, BertForSequenceClassification

    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    gpt2 = refs.Gpt2Tiny(vocab=50257, ctx=64, d=768, heads=12, layers=12)
    export(gpt2, torch.zeros((8, 64), dtype=torch.int64), os.path.join(OUT, "gpt2_small.onnx"),
           "logits")

    config = BertConfig(num_labels=2, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    bert = BertForSequenceClassification(config)

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids).logits

    export(Logits(bert), torch.zeros((8, 128), dtype=torch.int64),
           os.path.join(OUT, "bert_base.onnx"), "logits")


if __name__ == "__main__":
    main()
