"""WRN: the wide residual network of Zagoruyko and Komodakis (2016), WRN-(6·units+4)-widen_factor.

A 3×3 convolution to 16 channels, three groups of ``units`` pre-activation basic blocks
(batch norm, ReLU, 3×3 convolution, batch norm, ReLU, dropout, 3×3 convolution, plus the shortcut,
a 1×1 convolution where the shape changes) with ``16·k``, ``32·k`` and ``64·k`` channels and
strides 1, 2, 2, then batch norm, ReLU, global average pooling and a dense softmax layer.
Batch norm is the fused kernel in training mode; its moving averages are updated every step.
The loss adds ``weight_decay`` × the L2 norm of the convolution and dense kernels. Inputs:
``images`` float32 ``[batch, image_size, image_size, 3]``, ``labels`` int32 ``[batch]``.
Parameters ≈ ``18 · units · (16k)² · (1 + 4 + 16)`` (WRN-610-14: 1.9 B).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from jobs.models.layers import Net, dropout, placeholder, variable

v1 = tf.compat.v1


class _Builder:
    def __init__(self, params: dict[str, Any]) -> None:
        self.momentum = params["bn_momentum"]
        self.dropout = params["dropout"]
        self.kernels: list[tf.Variable] = []
        self.update_ops: list[tf.Operation] = []

    def conv(self, x: tf.Tensor, size: int, channels: int, stride: int, name: str) -> tf.Tensor:
        kernel = variable(name, [size, size, int(x.shape[-1]), channels], v1.variance_scaling_initializer(2.0))
        self.kernels.append(kernel)
        return tf.nn.conv2d(x, kernel, [1, stride, stride, 1], "SAME")

    def bn_relu(self, x: tf.Tensor, name: str) -> tf.Tensor:
        with v1.variable_scope(name):
            channels = int(x.shape[-1])
            gamma = variable("gamma", [channels], v1.ones_initializer())
            beta = variable("beta", [channels], v1.zeros_initializer())
            moving_mean = variable("moving_mean", [channels], v1.zeros_initializer(), trainable=False)
            moving_variance = variable("moving_variance", [channels], v1.ones_initializer(), trainable=False)
            # FusedBatchNormV2, not V3: V3's reserve_space_3 output has an unknown rank, which the
            # capture cannot size; the kernels and gradients are the same.
            empty = tf.constant([], tf.float32)
            y, mean, variance, _, _ = tf.raw_ops.FusedBatchNormV2(
                x=x, scale=gamma, offset=beta, mean=empty, variance=empty, epsilon=1e-5, is_training=True)
            for average, value in ((moving_mean, mean), (moving_variance, variance)):
                self.update_ops.append(average.assign_sub((average - value) * (1.0 - self.momentum)).op)
            return tf.nn.relu(y)

    def unit(self, x: tf.Tensor, channels: int, stride: int, name: str) -> tf.Tensor:
        with v1.variable_scope(name):
            activated = self.bn_relu(x, "bn_1")
            y = self.conv(activated, 3, channels, stride, "conv_1")
            y = dropout(self.bn_relu(y, "bn_2"), self.dropout)
            y = self.conv(y, 3, channels, 1, "conv_2")
            if stride != 1 or int(x.shape[-1]) != channels:
                x = self.conv(activated, 1, channels, stride, "shortcut")
            return x + y


def build(params: dict[str, Any], batch_size: int) -> Net:
    size = params["image_size"]
    images = placeholder(tf.float32, [batch_size, size, size, 3], "images")
    labels = placeholder(tf.int32, [batch_size], "labels")
    net = _Builder(params)
    k = params["widen_factor"]
    with v1.variable_scope("wrn"):
        x = net.conv(images, 3, 16, 1, "conv_0")
        for group, (channels, stride) in enumerate(((16 * k, 1), (32 * k, 2), (64 * k, 2))):
            for index in range(params["units"]):
                x = net.unit(x, channels, stride if index == 0 else 1, f"group_{group}/unit_{index}")
        x = tf.reduce_mean(net.bn_relu(x, "bn_final"), axis=[1, 2])
        with v1.variable_scope("logits"):
            kernel = variable("kernel", [int(x.shape[-1]), params["num_classes"]])
            net.kernels.append(kernel)
            bias = variable("bias", [params["num_classes"]], v1.zeros_initializer())
            logits = tf.nn.bias_add(tf.matmul(x, kernel), bias)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        if params["weight_decay"] > 0:
            with v1.name_scope("weight_decay"):
                loss += params["weight_decay"] * tf.add_n([tf.nn.l2_loss(kernel) for kernel in net.kernels])
        loss = tf.identity(loss, name="loss")
    return Net(loss, {"images": images, "labels": labels}, update_ops=net.update_ops)
