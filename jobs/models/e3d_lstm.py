"""E3D: the Eidetic 3D LSTM of Wang et al. (2019) for video prediction, after google/e3d_lstm.

Frames (``image_size``² × ``image_channels``) are cut into ``patch_size``² patches stacked as
channels. At each of ``total_length - 1`` steps a window of the last ``window_length`` frames (the
true frame while observing, then with scheduled sampling the true or the generated one) passes
``layers`` eidetic 3D-LSTM cells of ``hidden`` channels: 3D convolutions of kernel
``window_length × filter_size × filter_size`` compute the gates from the input, the hidden state
and a spatiotemporal memory that zigzags through the layers; the cell state attends (softmax over
positions) to the history of all previous cell states; layer norm on the gate pre-activations. A
``window_length × 1 × 1`` convolution of the top hidden state generates the next frame. Loss:
mean squared plus mean absolute error against the true next frames. Inputs: ``frames`` float32
``[batch, total_length, size/p, size/p, p²·channels]`` and ``real_input_flag`` float32 ``[batch,
total_length - input_length - 1, size/p, size/p, p²·channels]`` (1 = feed the true frame).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from jobs.models.layers import LayerNorm, Net, placeholder, weights

v1 = tf.compat.v1


class _Conv:
    """A 3D convolution (stride 1, same padding) with bias, its weights read once for all steps."""

    def __init__(self, name: str, kernel: tuple[int, int, int], inputs: int, outputs: int) -> None:
        with v1.variable_scope(name):
            self.kernel = weights("kernel", [*kernel, inputs, outputs])
            self.bias = weights("bias", [outputs], v1.zeros_initializer())

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.nn.bias_add(tf.nn.conv3d(x, self.kernel, [1, 1, 1, 1, 1], "SAME"), self.bias)


class _Cell:
    """One eidetic 3D-LSTM layer (``Eidetic3DLSTMCell`` of the original code)."""

    def __init__(self, name: str, inputs: int, channels: int, kernel: tuple[int, int, int],
                 params: dict[str, Any]) -> None:
        c = channels
        self.forget_bias = params["forget_bias"]
        axes = (1, 2, 3, 4)
        with v1.variable_scope(name):
            self.hidden = _Conv("hidden", kernel, c, 4 * c)
            self.inputs = _Conv("inputs", kernel, inputs, 7 * c)
            self.memory = _Conv("memory", kernel, c, 4 * c)
            self.output_cell = _Conv("output_cell", kernel, c, c)
            self.output_memory = _Conv("output_memory", kernel, c, c)
            self.state = _Conv("state", (1, 1, 1), 2 * c, c)
            self.self_attention_norm = LayerNorm.create("self_attention_norm", c, axes)
            parts = (("hidden", 4 * c), ("inputs", 7 * c), ("memory", 4 * c))
            self.norms: list[Any] = [LayerNorm.create(f"{part}_norm", size, axes) for part, size in parts] \
                if params["layer_norm"] else [tf.identity] * 3

    @staticmethod
    def attend(query: tf.Tensor, history: tf.Tensor) -> tf.Tensor:
        """Recall: softmax(query · historyᵀ) · history over all positions of the cell-state history."""
        shape = query.shape.as_list()
        batch, channels = shape[0], shape[-1]
        q = tf.reshape(query, [batch, -1, channels])
        keys = tf.reshape(history, [batch, -1, channels])
        attention = tf.nn.softmax(tf.matmul(q, keys, transpose_b=True), axis=2)
        return tf.reshape(tf.matmul(attention, keys), shape)

    def __call__(self, x: tf.Tensor, hidden: tf.Tensor, cell: tf.Tensor, memory: tf.Tensor,
                 history: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        hidden_norm, inputs_norm, memory_norm = self.norms
        i_h, g_h, r_h, o_h = tf.split(hidden_norm(self.hidden(hidden)), 4, -1)
        i_x, g_x, r_x, o_x, temporal_i_x, temporal_g_x, temporal_f_x = tf.split(inputs_norm(self.inputs(x)), 7, -1)
        i_t = tf.sigmoid(i_x + i_h)
        r_t = tf.sigmoid(r_x + r_h)
        g_t = tf.tanh(g_x + g_h)
        new_cell = self.self_attention_norm(cell + self.attend(r_t, history)) + i_t * g_t

        i_m, f_m, g_m, m_m = tf.split(memory_norm(self.memory(memory)), 4, -1)
        temporal_i = tf.sigmoid(temporal_i_x + i_m)
        temporal_f = tf.sigmoid(temporal_f_x + f_m + self.forget_bias)
        temporal_g = tf.tanh(temporal_g_x + g_m)
        new_memory = temporal_f * tf.tanh(m_m) + temporal_i * temporal_g

        output_gate = tf.tanh(o_x + o_h + self.output_cell(new_cell) + self.output_memory(new_memory))
        state = self.state(tf.concat([new_cell, new_memory], -1))
        return tf.tanh(state) * tf.sigmoid(output_gate), new_cell, new_memory


def build(params: dict[str, Any], batch_size: int) -> Net:
    patch = params["patch_size"]
    size = params["image_size"] // patch
    channels = patch * patch * params["image_channels"]
    total, observed, window = params["total_length"], params["input_length"], params["window_length"]
    hidden_channels = params["hidden"]
    frames = placeholder(tf.float32, [batch_size, total, size, size, channels], "frames")
    real_input_flag = placeholder(tf.float32, [batch_size, total - observed - 1, size, size, channels],
                                  "real_input_flag")
    kernel = (window, params["filter_size"], params["filter_size"])
    with v1.variable_scope("e3d_lstm"):
        cells = [_Cell(f"e3d_{index}", channels if index == 0 else hidden_channels, hidden_channels, kernel, params)
                 for index in range(params["layers"])]
        with v1.variable_scope("generate"):
            generate = _Conv("conv", (window, 1, 1), hidden_channels, channels)
        # tf.fill: the same ops at every batch size (tf.zeros switches from Const to Fill at 1,000 elements).
        zeros = tf.fill([batch_size, window, size, size, hidden_channels], 0.0, name="zero_state")
        hidden = [zeros] * len(cells)
        cell_state = [zeros] * len(cells)
        history: list[tf.Tensor | None] = [None] * len(cells)
        memory = zeros
        inputs = [tf.fill([batch_size, size, size, channels], 0.0, name="zero_frame")] * (window - 1)
        generated = []
        generated_frame = None
        for step in range(total - 1):
            with v1.name_scope(f"step_{step}"):
                if step < observed:
                    frame = frames[:, step]
                else:
                    flag = real_input_flag[:, step - observed]
                    frame = flag * frames[:, step] + (1.0 - flag) * generated_frame
                inputs.append(frame)
                if step % (window - 1) == 0:
                    x = tf.stack(inputs[-window:], axis=1)
                    for index, cell in enumerate(cells):
                        with v1.name_scope(f"layer_{index}"):
                            previous = history[index]
                            history[index] = cell_state[index] if previous is None else \
                                tf.concat([previous, cell_state[index]], 1)
                            hidden[index], cell_state[index], memory = cell(
                                x if index == 0 else hidden[index - 1], hidden[index], cell_state[index], memory,
                                history[index])
                # The window's frames collapse into one by a stride-window convolution.
                window_out = tf.nn.conv3d(hidden[-1], generate.kernel, [1, window, 1, 1, 1], "SAME")
                generated_frame = tf.squeeze(tf.nn.bias_add(window_out, generate.bias), axis=1)
                generated.append(generated_frame)
        prediction = tf.stack(generated, axis=1)
        error = prediction - frames[:, 1:]
        loss = tf.identity(tf.reduce_mean(tf.square(error)) + tf.reduce_mean(tf.abs(error)), name="loss")
    return Net(loss, {"frames": frames, "real_input_flag": real_input_flag})
