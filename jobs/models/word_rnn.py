"""Word-RNN: a multi-layer LSTM word-level language model (the paper's Word-RNN, after
hunkim/word-rnn-tensorflow, itself after Karpathy's char-rnn).

Embedding lookup, ``layers`` ``BasicLSTMCell`` layers statically unrolled over ``seq_length`` steps
(``legacy_seq2seq.rnn_decoder``), the outputs of all steps concatenated into one softmax layer over
the vocabulary, mean cross-entropy. Inputs: ``tokens`` and ``targets``, int32 ``[batch, seq_length]``.
Parameters: ``vocab × (embedding + hidden)`` in the embedding and softmax, about ``8 hidden²`` per
LSTM layer (8 layers of 2048: 0.27 B).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from jobs.models.layers import Net, dense, lstm_layer, lstm_stack, placeholder, variable

v1 = tf.compat.v1


def build(params: dict[str, Any], batch_size: int) -> Net:
    steps, hidden = params["seq_length"], params["hidden_size"]
    tokens = placeholder(tf.int32, [batch_size, steps], "tokens")
    targets = placeholder(tf.int32, [batch_size, steps], "targets")
    with v1.variable_scope("word_rnn"):
        embedding = variable("embedding", [params["vocab_size"], params["embedding_size"]],
                             v1.random_uniform_initializer(-0.1, 0.1))
        embedded = tf.nn.embedding_lookup(embedding, tokens)
        inputs = tf.unstack(embedded, axis=1)
        cells = [lstm_layer(params["embedding_size"] if i == 0 else hidden, hidden, f"lstm_{i}", params["forget_bias"])
                 for i in range(params["layers"])]
        outputs = lstm_stack(inputs, cells, dropout_rate=params["dropout"])
        output = tf.reshape(tf.concat(outputs, 1), [-1, hidden])
        logits = dense(output, params["vocab_size"], "softmax")
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.reshape(targets, [-1]), logits=logits), name="loss")
    return Net(loss, {"tokens": tokens, "targets": targets}, tokens_per_step=batch_size * steps)
