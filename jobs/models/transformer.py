"""TRN: the Transformer encoder–decoder of Vaswani et al. (2017), in tensor2tensor's layout.

Pre-norm layers (``x + dropout(sublayer(layer_norm(x)))``, T2T's default pre/post-processing) with
multi-head attention (``heads`` heads, no projection biases) and a ReLU feed-forward block of
``inner_dim``; ``encoder_layers`` self-attention layers, ``decoder_layers`` layers of causal
self-attention, attention over the encoder output and feed-forward; a final layer norm on each
stack. Sinusoidal positions; embeddings scaled by ``sqrt(model_dim)``; with ``share_embeddings``
one ``[vocab, model_dim]`` matrix embeds source and target and is the softmax weight. Inputs:
``source`` int32 ``[batch, source_length]`` and ``target`` int32 ``[batch, target_length]``
(id 0 is padding, masked out of attention and loss); the decoder reads the target shifted right.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf

from jobs.models.layers import Net, compute, dropout, layer_norm, placeholder, variable

v1 = tf.compat.v1

_NEG_INF = -1e9


def positions(length: int, dim: int) -> np.ndarray:
    """The sinusoidal position signal ``[length, dim]`` (T2T's ``get_timing_signal_1d``)."""
    half = dim // 2
    inverse = np.exp(np.arange(half) * -(math.log(1.0e4) / max(half - 1, 1)))
    angles = np.arange(length)[:, None] * inverse[None, :]
    signal = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    return np.pad(signal, [[0, 0], [0, dim % 2]]).astype(np.float32)


class _Builder:
    def __init__(self, params: dict[str, Any], batch_size: int) -> None:
        self.batch = batch_size
        self.dim = params["model_dim"]
        self.inner = params["inner_dim"]
        self.heads = params["heads"]
        self.rate = params["dropout"]

    def project(self, x: tf.Tensor, units: int, name: str, *, bias: bool = False) -> tf.Tensor:
        """Dense layer over the last axis of a ``[batch, length, d]`` tensor."""
        length, width = int(x.shape[1]), int(x.shape[2])
        kernel = compute(variable(f"{name}/kernel", [width, units]))
        y = tf.matmul(tf.reshape(x, [self.batch * length, width]), kernel)
        if bias:
            y = tf.nn.bias_add(y, compute(variable(f"{name}/bias", [units], v1.zeros_initializer())))
        return tf.reshape(y, [self.batch, length, units])

    def split_heads(self, x: tf.Tensor) -> tf.Tensor:
        length = int(x.shape[1])
        x = tf.reshape(x, [self.batch, length, self.heads, self.dim // self.heads])
        return tf.transpose(x, [0, 2, 1, 3])

    def attention(self, query: tf.Tensor, memory: tf.Tensor, bias: tf.Tensor, name: str) -> tf.Tensor:
        with v1.variable_scope(name):
            q = self.split_heads(self.project(query, self.dim, "q")) * (self.dim // self.heads) ** -0.5
            k = self.split_heads(self.project(memory, self.dim, "k"))
            v = self.split_heads(self.project(memory, self.dim, "v"))
            scores = tf.matmul(q, k, transpose_b=True)
            weights = compute(tf.nn.softmax(tf.cast(scores, tf.float32) + bias if scores.dtype != tf.float32
                                            else scores + bias))  # the softmax in float32
            context = tf.matmul(dropout(weights, self.rate), v)
            context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [self.batch, int(query.shape[1]), self.dim])
            return self.project(context, self.dim, "output")

    def feed_forward(self, x: tf.Tensor, name: str) -> tf.Tensor:
        with v1.variable_scope(name):
            hidden = dropout(tf.nn.relu(self.project(x, self.inner, "hidden", bias=True)), self.rate)
            return self.project(hidden, self.dim, "output", bias=True)

    def residual(self, x: tf.Tensor, name: str, sublayer: Any) -> tf.Tensor:
        with v1.variable_scope(name):
            return x + dropout(sublayer(layer_norm(x, "layer_norm")), self.rate)

    def embed(self, ids: tf.Tensor, embedding: tf.Variable) -> tf.Tensor:
        x = compute(tf.nn.embedding_lookup(embedding, ids)) * self.dim**0.5
        signal = positions(int(ids.shape[1]), self.dim)
        return dropout(x + (signal if x.dtype == tf.float32 else tf.cast(signal, x.dtype)), self.rate)


PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")  # computes in any (jobs.models.layers.computing)


def build(params: dict[str, Any], batch_size: int) -> Net:
    vocab, dim = params["vocab_size"], params["model_dim"]
    source = placeholder(tf.int32, [batch_size, params["source_length"]], "source")
    target = placeholder(tf.int32, [batch_size, params["target_length"]], "target")
    net = _Builder(params, batch_size)
    with v1.variable_scope("transformer"):
        initializer = v1.random_normal_initializer(0.0, dim**-0.5)
        shared = variable("embedding", [vocab, dim], initializer)
        source_embedding = shared
        target_embedding = softmax = shared
        if not params["share_embeddings"]:
            target_embedding = variable("target_embedding", [vocab, dim], initializer)
            softmax = variable("softmax", [vocab, dim], initializer)
        source_bias = tf.reshape(tf.cast(tf.equal(source, 0), tf.float32) * _NEG_INF,
                                 [batch_size, 1, 1, params["source_length"]])
        with v1.variable_scope("encoder"):
            x = net.embed(source, source_embedding)
            for index in range(params["encoder_layers"]):
                with v1.variable_scope(f"layer_{index}"):
                    x = net.residual(x, "self_attention", lambda y: net.attention(y, y, source_bias, "attention"))
                    x = net.residual(x, "ffn", lambda y: net.feed_forward(y, "ffn"))
            encoded = layer_norm(x, "output_norm")
        length = params["target_length"]
        causal = np.triu(np.full([length, length], _NEG_INF, np.float32), k=1).reshape(1, 1, length, length)
        with v1.variable_scope("decoder"):
            shifted = tf.pad(target, [[0, 0], [1, 0]])[:, :-1]
            y = net.embed(shifted, target_embedding)
            for index in range(params["decoder_layers"]):
                with v1.variable_scope(f"layer_{index}"):
                    y = net.residual(y, "self_attention", lambda z: net.attention(z, z, causal, "attention"))
                    y = net.residual(y, "encdec_attention",
                                     lambda z: net.attention(z, encoded, source_bias, "attention"))
                    y = net.residual(y, "ffn", lambda z: net.feed_forward(z, "ffn"))
            decoded = layer_norm(y, "output_norm")
        logits = tf.matmul(tf.reshape(decoded, [batch_size * length, dim]), compute(softmax),
                           transpose_b=True)
        logits = tf.cast(logits, tf.float32) if logits.dtype != tf.float32 else logits  # the loss in float32
        labels = tf.reshape(target, [-1])
        weights = tf.cast(tf.not_equal(labels, 0), tf.float32)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        loss = tf.identity(tf.reduce_sum(losses * weights) / tf.maximum(tf.reduce_sum(weights), 1.0), name="loss")
    return Net(loss, {"source": source, "target": target}, tokens_per_step=batch_size * length)
