"""The FLOP count behind MFU and the matmul floor: the list of a step's GEMMs against the step's own graph."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.configs import get_preset
from bert_tf.modeling import losses
from bert_tf.modeling.pretrainer import BertPretrainer
from bert_tf.training import metrics


def _graph_matmuls(graph) -> list[int]:
    """FLOPs of each MatMul, BatchMatMul and Einsum of a traced graph.

    Products with a row of ones (`tf.ones`, a Fill) are sums, bias gradients, not GEMMs of the model.
    """
    flops = []
    for op in graph.get_operations():
        if op.type == "MatMul" and any(t.op.type == "Fill" for t in op.inputs):
            continue
        if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3"):
            a = op.inputs[0].shape
            k = a[-2] if op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x") else a[-1]
            flops.append(2 * int(np.prod(op.outputs[0].shape)) * k)
        elif op.type == "Einsum":
            inputs, _ = op.get_attr("equation").decode().split("->")
            sizes = {}
            for letters, tensor in zip(inputs.split(","), op.inputs):
                sizes.update(zip(letters, tensor.shape))
            flops.append(2 * int(np.prod(list(sizes.values()))))
    return flops


def test_gemm_list_is_the_matmuls_of_the_pretrainers_forward_and_backward():
    config = dataclasses.replace(get_preset("tiny_uncased"), vocab_size=97)
    batch, seq, predictions = 2, 16, 3
    rng = np.random.default_rng(0)
    features = {
        "input_word_ids": rng.integers(5, 97, (batch, seq)).astype(np.int32),
        "input_mask": np.ones((batch, seq), np.int32), "input_type_ids": np.zeros((batch, seq), np.int32),
        "masked_lm_positions": np.tile(np.arange(1, predictions + 1), (batch, 1)).astype(np.int32),
        "masked_lm_ids": rng.integers(5, 97, (batch, predictions)).astype(np.int32),
        "masked_lm_weights": np.ones((batch, predictions), np.float32),
        "next_sentence_labels": np.zeros((batch,), np.int32)}
    model = BertPretrainer(config)
    inputs = ("input_word_ids", "input_mask", "input_type_ids", "masked_lm_positions")

    @tf.function
    def gradients(features):
        with tf.GradientTape() as tape:
            loss = losses.pretraining_loss(features, model({k: features[k] for k in inputs}, training=True))["loss"]
        return tape.gradient(loss, model.trainable_variables)

    graph = gradients.get_concrete_function(
        {k: tf.TensorSpec(v.shape, tf.as_dtype(v.dtype)) for k, v in features.items()}).graph
    traced = _graph_matmuls(graph)
    listed = metrics.pretraining_gemms(config, batch, seq, predictions)
    assert sorted(traced) == sorted(g.flops for g in listed)
    forward = listed[:len(listed) // 3]
    assert sum(g.flops for g in listed) == 3 * sum(g.flops for g in forward)


@pytest.mark.parametrize("preset, seq, predictions", [("mini_uncased", 128, 20), ("base_uncased", 512, 80)])
def test_flops_per_sequence_is_the_closed_form(preset, seq, predictions):
    c = get_preset(preset)
    h, i, v = c.hidden_size, c.intermediate_size, c.vocab_size
    encoder = c.num_hidden_layers * (seq * (4 * h * h + 2 * h * i) + 2 * seq * seq * h) + h * h + 2 * h
    assert metrics.pretraining_flops_per_sequence(c, seq, predictions) == 6 * (encoder + predictions * (h * h + h * v))
    # Without the NSP head (keras-hub's masked LM): two FLOPs per multiply-add, three passes, of 2h each.
    with_nsp = sum(g.flops for g in metrics.pretraining_gemms(c, 4, seq, predictions))
    assert with_nsp - sum(g.flops for g in metrics.pretraining_gemms(c, 4, seq, predictions, nsp=False)) == 3 * 2 * 4 * h * 2


def test_gemm_floor_runs_every_product():
    gemms = metrics.pretraining_gemms(dataclasses.replace(get_preset("tiny_uncased"), vocab_size=50), 2, 8, 2)
    call = metrics.gemm_floor_call(gemms, tf.bfloat16)
    assert np.isfinite(float(call()))
    graph = call.func.get_concrete_function(*call.args).graph
    assert sorted(_graph_matmuls(graph)) == sorted(g.flops for g in gemms)
    assert {op.outputs[0].dtype for op in graph.get_operations() if op.type.startswith("BatchMatMul")} == {tf.bfloat16}


def test_copy_bandwidth_counts_the_bytes_read_and_written():
    # 8 MB read and 8 MB written per call: between 0.1 GB/s and 10 TB/s on any machine, where a
    # mistake of 2**20 in the bytes counted would fall outside.
    assert 1e8 < metrics.measure_copy_bandwidth(megabytes=8, seconds=0.05) < 1e13
