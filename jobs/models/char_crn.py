"""Char-CRN: the character-aware neural language model of Kim et al. (2016), as in
mkroutikov/tf-lstm-char-cnn (the paper's Char-CRN).

Each word is a sequence of ``max_word_length`` character ids; a character embedding
(``char_embed_size``) feeds one convolution per kernel width (``kernel_widths``,
``kernel_features`` filters each), ``tanh`` and max-over-time pooling; the concatenated features
pass ``highway_layers`` highway layers, then ``layers`` LSTM layers unrolled over ``seq_length``
words (dropout on every layer's output), and a softmax over the word vocabulary at every step
(weights shared across steps, one loss per step as in the original). Inputs: ``chars`` int32
``[batch, seq_length, max_word_length]``, ``targets`` int32 ``[batch, seq_length]``.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from jobs.models.layers import Net, dense, lstm_layer, lstm_stack, placeholder, variable, weights

v1 = tf.compat.v1


def _char_cnn(embedded: tf.Tensor, widths: tuple[int, ...], features: tuple[int, ...]) -> tf.Tensor:
    """``[words, 1, max_word_length, embed]`` → ``[words, sum(features)]`` (TDNN with max pooling)."""
    pooled = []
    for width, count in zip(widths, features):
        with v1.variable_scope(f"kernel_{width}"):
            kernel = variable("w", [1, width, int(embedded.shape[-1]), count])
            bias = variable("b", [count], v1.zeros_initializer())
            conv = tf.nn.bias_add(tf.nn.conv2d(embedded, kernel, [1, 1, 1, 1], "VALID"), bias)
            pooled.append(tf.reduce_max(tf.tanh(conv), axis=[1, 2]))
    return tf.concat(pooled, 1)


def _highway(x: tf.Tensor, layers: int) -> tf.Tensor:
    """``t·relu(W_h x) + (1 - t)·x`` with ``t = sigmoid(W_t x - 2)`` (Srivastava et al., 2015)."""
    size = int(x.shape[-1])
    for index in range(layers):
        with v1.variable_scope(f"highway_{index}"):
            gate = tf.sigmoid(dense(x, size, "transform", bias_init=-2.0))
            x = gate * tf.nn.relu(dense(x, size, "hidden")) + (1.0 - gate) * x
    return x


def build(params: dict[str, Any], batch_size: int) -> Net:
    steps, hidden, width = params["seq_length"], params["hidden_size"], params["max_word_length"]
    chars = placeholder(tf.int32, [batch_size, steps, width], "chars")
    targets = placeholder(tf.int32, [batch_size, steps], "targets")
    with v1.variable_scope("char_crn"):
        char_embedding = variable("char_embedding", [params["char_vocab_size"], params["char_embed_size"]],
                                  v1.random_uniform_initializer(-0.05, 0.05))
        embedded = tf.nn.embedding_lookup(char_embedding, chars)
        embedded = tf.reshape(embedded, [batch_size * steps, 1, width, params["char_embed_size"]])
        with v1.variable_scope("tdnn"):
            features = _char_cnn(embedded, params["kernel_widths"], params["kernel_features"])
        features = _highway(features, params["highway_layers"])
        inputs = tf.unstack(tf.reshape(features, [batch_size, steps, -1]), axis=1)
        size = sum(params["kernel_features"])
        cells = [lstm_layer(size if i == 0 else hidden, hidden, f"lstm_{i}", params["forget_bias"])
                 for i in range(params["layers"])]
        outputs = lstm_stack(inputs, cells, dropout_rate=params["dropout"])
        with v1.variable_scope("softmax"):
            kernel = weights("kernel", [hidden, params["word_vocab_size"]])
            bias = weights("bias", [params["word_vocab_size"]], v1.zeros_initializer())
        losses = []
        for output, target in zip(outputs, tf.unstack(targets, axis=1)):
            logits = tf.nn.bias_add(tf.matmul(output, kernel), bias)
            losses.append(tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target, logits=logits)))
        loss = tf.add_n(losses) / steps
        loss = tf.identity(loss, name="loss")
    return Net(loss, {"chars": chars, "targets": targets}, tokens_per_step=batch_size * steps)
