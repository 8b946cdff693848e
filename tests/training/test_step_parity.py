"""Ten pretraining steps of bert_tf against the original recipe written out in torch.

Both sides start from the same Hugging Face `BertForPreTraining` weights and
see the same batches. The torch side is google-research/bert's recipe: its
masked-LM and NSP losses (run_pretraining.py), warmup + linear decay,
clipping by global norm 1.0 and AdamWeightDecayOptimizer (no bias correction,
weight decay 0.01 except on names matching LayerNorm, layer_norm or bias).
The bert_tf side is the pretraining driver's own optimizer and TrainStep.
"""

import re

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from bert_tf import checkpoints
from bert_tf.modeling.pretrainer import BertPretrainer
from bert_tf.training.optimization import OptimizerConfig
from bert_tf.training.tasks import PretrainingTask
from bert_tf.training.step import TrainStep, build_for_training

STEPS, BATCH, SEQ, PREDICTIONS = 10, 8, 16, 4
OPTIMIZER = OptimizerConfig(learning_rate=1e-3, num_train_steps=STEPS, num_warmup_steps=3)
# The original's exclusions (create_optimizer), matched here against Hugging Face names.
NO_DECAY = ("LayerNorm", "layer_norm", "bias")


def _batches(config, seed=0):
    """Padded batches with distinct masked positions and some empty prediction slots."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(STEPS):
        lengths = rng.integers(PREDICTIONS + 2, SEQ + 1, size=BATCH)
        mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
        ids = rng.integers(5, config.vocab_size, size=(BATCH, SEQ)).astype(np.int32) * mask
        types = ((np.arange(SEQ)[None, :] >= lengths[:, None] // 2) * mask).astype(np.int32)
        counts = rng.integers(1, PREDICTIONS + 1, size=BATCH)
        weights = (np.arange(PREDICTIONS)[None, :] < counts[:, None]).astype(np.float32)
        positions = np.stack([rng.choice(np.arange(1, n), PREDICTIONS, replace=False)
                              for n in lengths]).astype(np.int32)
        batches.append({
            "input_word_ids": ids, "input_mask": mask, "input_type_ids": types,
            # Empty slots hold position 0 and id 0, as the original's records do.
            "masked_lm_positions": (positions * weights).astype(np.int32),
            "masked_lm_ids": (rng.integers(5, config.vocab_size, size=(BATCH, PREDICTIONS))
                              * weights).astype(np.int32),
            "masked_lm_weights": weights,
            "next_sentence_labels": rng.integers(0, 2, size=(BATCH,)).astype(np.int32),
        })
    return batches


def _learning_rate(step):
    """The original's warmup from 0, then linear decay to 0 at num_train_steps."""
    if step < OPTIMIZER.num_warmup_steps:
        return OPTIMIZER.learning_rate * step / OPTIMIZER.num_warmup_steps
    return OPTIMIZER.learning_rate * (1.0 - step / OPTIMIZER.num_train_steps)


def _torch_losses(model, batch):
    """The original's losses: weighted masked-LM mean (+1e-5 in the denominator) and NSP mean."""
    t = {k: torch.tensor(v, dtype=torch.float32 if k == "masked_lm_weights" else torch.long)
         for k, v in batch.items()}
    out = model(input_ids=t["input_word_ids"], attention_mask=t["input_mask"],
                token_type_ids=t["input_type_ids"])
    # HF scores every position; the original scores the gathered ones.
    positions = t["masked_lm_positions"][..., None].expand(-1, -1, out.prediction_logits.shape[-1])
    logits = torch.gather(out.prediction_logits, 1, positions)
    xent = torch.nn.functional.cross_entropy(logits.flatten(0, 1), t["masked_lm_ids"].flatten(),
                                             reduction="none")
    weights = t["masked_lm_weights"].flatten()
    mlm = (xent * weights).sum() / (weights.sum() + 1e-5)
    nsp = torch.nn.functional.cross_entropy(out.seq_relationship_logits, t["next_sentence_labels"])
    return mlm, nsp


def _train_torch(model, batches):
    """The original step: clip by global norm 1.0, then AdamWeightDecayOptimizer's update."""
    params = dict(model.named_parameters())  # tied parameters once, as torch sums their grads
    slots = {name: (torch.zeros_like(p), torch.zeros_like(p)) for name, p in params.items()}
    losses, norms = [], []
    for step, batch in enumerate(batches):
        model.zero_grad()
        mlm, nsp = _torch_losses(model, batch)
        (mlm + nsp).backward()
        grads = {name: p.grad for name, p in params.items()}
        # tf.clip_by_global_norm: scale by clip / max(norm, clip) (torch's
        # clip_grad_norm_ adds 1e-6 to the norm).
        norm = torch.sqrt(sum((g * g).sum() for g in grads.values()))
        scale = OPTIMIZER.clip_norm / torch.maximum(norm, torch.tensor(OPTIMIZER.clip_norm))
        lr = _learning_rate(step)
        with torch.no_grad():
            for name, p in params.items():
                g = grads[name] * scale
                m, v = slots[name]
                m.copy_(OPTIMIZER.beta_1 * m + (1.0 - OPTIMIZER.beta_1) * g)
                v.copy_(OPTIMIZER.beta_2 * v + (1.0 - OPTIMIZER.beta_2) * g * g)
                update = m / (torch.sqrt(v) + OPTIMIZER.epsilon)
                if not any(re.search(r, name) for r in NO_DECAY):
                    update = update + OPTIMIZER.weight_decay * p
                p.sub_(lr * update)
        losses.append((mlm.item(), nsp.item()))
        norms.append(norm.item())
    return losses, norms


def _train_bert_tf(config, optimizer_config, hf_dir, batches):
    """The pretraining driver's path: its optimizer, TrainStep and per-step sums."""
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    model, optimizer, _ = build_for_training(lambda: BertPretrainer(config), optimizer_config,
                                             "float32", strategy)
    checkpoints.load_weights(model, hf_dir)
    step = TrainStep(model, optimizer, strategy, PretrainingTask(), train_batch_size=BATCH,
                     eval_batch_size=BATCH, clip_norm=optimizer_config.clip_norm)
    stacked = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    iterator = iter(tf.data.Dataset.from_tensor_slices(stacked).batch(BATCH))
    losses, norms = [], []
    for _ in batches:
        sums = {k: float(v) for k, v in step.train(iterator).items()}
        losses.append((sums["mlm_loss"] / sums["mlm_weight"], sums["nsp_loss"] / sums["examples"]))
        norms.append(sums["grad_norm"])
    return model, losses, norms


def _hf_weights(model, config):
    """bert_tf's weights under their Hugging Face names and layouts (the checkpoint table)."""
    variables = {v.path: v.numpy() for v in model.weights}
    return {(e.hf if e.hf.startswith("cls.") else f"bert.{e.hf}"):
            (variables[e.path].T if e.hf_transposed else variables[e.path])
            for e in checkpoints.pretrainer_table(config)}


def _max_weight_difference(ours, hf_model):
    reference = {name: p.detach().numpy() for name, p in hf_model.named_parameters()}
    assert ours.keys() == reference.keys()
    return max(np.abs(ours[name] - reference[name]).max() for name in reference)


@pytest.mark.slow
def test_ten_pretraining_steps_match_the_original_recipe_in_torch(tiny_config, tmp_path):
    config = tiny_config.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    assert config.hidden_act == "gelu"  # exact GELU on both sides
    torch.manual_seed(0)
    hf_model = transformers.BertForPreTraining(transformers.BertConfig(**config.to_dict()))
    with torch.no_grad():  # LayerNorms start at 1/0 and biases at 0: make every value distinct
        for param in hf_model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    hf_model.save_pretrained(tmp_path / "hf")
    # HF ties the MLM decoder to the word embeddings, with its own output bias, as
    # bert_tf's head: one parameter each, whose gradient sums both uses.
    head = hf_model.cls.predictions
    assert head.decoder.weight is hf_model.bert.embeddings.word_embeddings.weight
    assert head.decoder.bias is head.bias
    batches = _batches(config)

    # The hand-written loss is HF's own where they agree (distinct positions, and
    # labels -100 off the weighted ones; HF has no 1e-5).
    first = {k: torch.tensor(v, dtype=torch.long) for k, v in batches[0].items()
             if k != "masked_lm_weights"}
    used = batches[0]["masked_lm_weights"] > 0
    labels = torch.full(first["input_word_ids"].shape, -100)
    labels[np.nonzero(used)[0], batches[0]["masked_lm_positions"][used]] = torch.tensor(
        batches[0]["masked_lm_ids"][used], dtype=torch.long)
    with torch.no_grad():
        mlm, nsp = _torch_losses(hf_model, batches[0])
        hf_loss = hf_model(input_ids=first["input_word_ids"], attention_mask=first["input_mask"],
                           token_type_ids=first["input_type_ids"], labels=labels,
                           next_sentence_label=first["next_sentence_labels"]).loss
    assert float(mlm + nsp) == pytest.approx(float(hf_loss), rel=1e-5)

    model, losses, norms = _train_bert_tf(config, OPTIMIZER, str(tmp_path / "hf"), batches)
    expected_losses, expected_norms = _train_torch(hf_model, batches)
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-5)
    np.testing.assert_allclose(norms, expected_norms, rtol=1e-5)
    assert max(expected_norms) > OPTIMIZER.clip_norm  # clipping took part
    difference = _max_weight_difference(_hf_weights(model, config), hf_model)
    assert difference <= 1e-5, difference  # max abs; the weights moved by up to 0.02

    # The comparison can fail: Adam bias correction alone moves the weights far more.
    corrected = OptimizerConfig(**{**OPTIMIZER.__dict__, "adam_bias_correction": True})
    model, _, _ = _train_bert_tf(config, corrected, str(tmp_path / "hf"), batches)
    assert _max_weight_difference(_hf_weights(model, config), hf_model) > 1e-3
