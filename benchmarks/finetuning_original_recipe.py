"""The original recipe in PyTorch, for the `hf_matched` rows: optimization.py's AdamWeightDecay arithmetic,
schedule and step counts, the original's batches across epoch ends, its output layer's draw and its trained [PAD]
embedding."""
import re

from finetuning_recipe import MAX_GRAD_NORM, WARMUP_PROPORTION

ORIGINAL_NO_DECAY = ("LayerNorm", "layer_norm", "bias")  # optimization.DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY


def decays(name):
    """Whether the original applies weight decay to a variable of this name (re.search of each pattern)."""
    return not any(re.search(pattern, name) for pattern in ORIGINAL_NO_DECAY)


def original_step_counts(num_examples, batch_size, epochs, warmup_proportion=WARMUP_PROPORTION):
    """(num_train_steps, num_warmup_steps) as the original runners count them: int() of each."""
    total = int(num_examples / batch_size * epochs)
    return total, int(total * warmup_proportion)


def original_batches(num_rows, batch_size, num_steps, generator):
    """Index lists of num_steps batches: shuffled passes over the rows concatenated (a new permutation each
    pass), cut into batches across pass boundaries, as the original's repeat() then batch(drop_remainder);
    what is left after the last whole batch is dropped."""
    import torch
    needed, stream = num_steps * batch_size, []
    while len(stream) < needed:
        stream += torch.randperm(num_rows, generator=generator).tolist()
    return [stream[k * batch_size:(k + 1) * batch_size] for k in range(num_steps)]


class OriginalSchedule:
    """optimization.LinearWarmupDecay read as the original's train step reads it: update k (0-based) uses the
    rate of the incremented global step, lr(k + 1); warm-up init_lr * s / W for s < W overrides the decay
    init_lr * (1 - min(s, T) / T) (so the rate after warm-up is (1 - W / T) x init_lr, and the last update
    uses 0)."""

    def __init__(self, init_lr, num_train_steps, num_warmup_steps):
        self.init_lr, self.total, self.warmup = init_lr, num_train_steps, num_warmup_steps

    def rate(self, global_step):
        if global_step < self.warmup:
            return self.init_lr * global_step / self.warmup
        return self.init_lr * (1.0 - min(global_step, self.total) / self.total)

    def __call__(self, update_index):
        return self.rate(update_index + 1)


class OriginalAdamWeightDecay:
    """The original AdamWeightDecayOptimizer in PyTorch, float32, with the original's clipping.

    step(lr): gradients clipped to global norm clip_norm the way tf.clip_by_global_norm does
    (g * clip_norm / max(norm, clip_norm)), the norm over the dense gradients (the word embeddings' summed per
    token: the original's count with one-hot lookups, on TPU; off TPU it, and this project, count them per token
    occurrence), then per parameter: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
    update = m / (sqrt(v) + eps) (+ weight_decay_rate * p unless the name matches LayerNorm, layer_norm or
    bias), p -= lr * update. No bias correction. Parameters without a gradient are left alone.
    """

    def __init__(self, named_parameters, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 clip_norm=MAX_GRAD_NORM):
        import torch
        self.params = [(name, p) for name, p in named_parameters if p.requires_grad]
        self.decay = {name: weight_decay_rate if decays(name) else 0.0 for name, _ in self.params}
        self.beta_1, self.beta_2, self.epsilon, self.clip_norm = beta_1, beta_2, epsilon, clip_norm
        self.m = {name: torch.zeros_like(p) for name, p in self.params}
        self.v = {name: torch.zeros_like(p) for name, p in self.params}

    def step(self, lr):
        """Clips, updates; returns the global norm before clipping."""
        import torch
        with torch.no_grad():
            live = [(name, p) for name, p in self.params if p.grad is not None]
            norm = torch.sqrt(sum(torch.sum(p.grad * p.grad) for _, p in live))
            scale = self.clip_norm / torch.maximum(norm, torch.tensor(self.clip_norm)) if self.clip_norm else 1.0
            for name, p in live:
                grad = p.grad * scale
                m, v = self.m[name], self.v[name]
                m.mul_(self.beta_1).add_(grad, alpha=1.0 - self.beta_1)
                v.mul_(self.beta_2).add_(grad * grad, alpha=1.0 - self.beta_2)
                update = m / (torch.sqrt(v) + self.epsilon)
                if self.decay[name]:
                    update = update + self.decay[name] * p
                p.sub_(lr * update)
        return float(norm)

    def zero_grad(self):
        for _, p in self.params:
            p.grad = None


def original_head_weights(shape, generator):
    """A new output layer's weights as the original draws them: truncated normal(0, 0.02), cut at 2 std."""
    import torch
    weight = torch.empty(shape)
    torch.nn.init.trunc_normal_(weight, std=0.02, a=-0.04, b=0.04, generator=generator)
    return weight


def train_pad_embedding_like_original(model):
    """The original trains the [PAD] token's embedding row like any other: where a loss reaches padded positions
    (SQuAD's start/end softmax spans the whole window, padding included), that row gets a gradient. HF's
    nn.Embedding(padding_idx=pad_token_id) gives it none; padding_idx None lets it learn."""
    model.base_model.embeddings.word_embeddings.padding_idx = None


def init_head_like_original(model, generator):
    """The new output layer as the original creates it: original_head_weights, bias 0 (transformers draws
    normal(0, 0.02))."""
    import torch
    head = getattr(model, "classifier", None) or getattr(model, "qa_outputs")
    with torch.no_grad():
        head.weight.copy_(original_head_weights(head.weight.shape, generator))
        head.bias.zero_()
