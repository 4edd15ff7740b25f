"""A Moonshine decoder graph that can decode several segments of different lengths in one batch.

The merged decoder (``decoder_model_merged``) has no attention mask: every row of a batch attends over all
``T`` encoder positions, so segments of different lengths could not share a call (zero padding would be
heard).  :func:`add_cross_attention_bias` gives the graph one more input, ``encoder_attention_bias``
``(batch, 1, 1, T)`` float32, added to the scores of every cross-attention (``encoder_attn``) before its
softmax: 0 where a row's encoder states are real, :data:`PAD_BIAS` where they are padding, whose softmax
weight is then exactly 0.  A bias of zeros gives the graph's own outputs (``x + 0`` is ``x``); a padded row
gives its unpadded outputs up to float rounding (tests: ``tests/second_pass/test_moonshine_batch.py``).
The self-attention needs no mask: the rows of a batch advance one token a step together, so their
positions agree.
"""

from __future__ import annotations

__all__ = ["BIAS_INPUT", "PAD_BIAS", "add_cross_attention_bias"]

BIAS_INPUT = "encoder_attention_bias"
PAD_BIAS = -1e9
"""The bias of a padded encoder position: exp(-1e9 + a score) is 0 in float32."""


def add_cross_attention_bias(model) -> int:
    """Edit the ONNX ``model`` (a Moonshine merged decoder, in place): add the input :data:`BIAS_INPUT` and add
    it to the input of every cross-attention ``Softmax`` (named ``.../encoder_attn/...``) in the graph and in
    its ``If`` branches; returns how many were changed (ValueError when none: not a Moonshine decoder)."""
    from onnx import AttributeProto, TensorProto, helper

    graphs = [model.graph]
    for g in graphs:
        graphs += [a.g for n in g.node for a in n.attribute if a.type == AttributeProto.GRAPH]
    if any(i.name == BIAS_INPUT for i in model.graph.input):
        raise ValueError(f"the decoder already has an input {BIAS_INPUT!r}")
    changed = 0
    for g in reversed(graphs):  # branches before the graph that holds them: re-adding a node copies it
        nodes = []
        for n in g.node:
            if n.op_type == "Softmax" and "encoder_attn" in n.name:
                biased = f"{n.input[0]}_biased"
                nodes.append(helper.make_node("Add", [n.input[0], BIAS_INPUT], [biased], name=f"{n.name}_bias"))
                n.input[0] = biased
                changed += 1
            nodes.append(n)
        del g.node[:]
        g.node.extend(nodes)
    if not changed:
        raise ValueError("no cross-attention softmax (encoder_attn) found: not a Moonshine decoder")
    model.graph.input.append(helper.make_tensor_value_info(
        BIAS_INPUT, TensorProto.FLOAT, ["batch_size", 1, 1, "encoder_sequence_length"]))
    return changed
