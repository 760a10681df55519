"""The step of M micro-batches written down from the step built at M = 2 (pardnn/batch/replicate.py): a
hand-made two-copy step with every case the module names (a copied chain, a variable the copies
read, a shared sum, an op only the last copy runs, colocation groups named after a copy's op),
worked out by hand at M = 4; and each refusal, naming the op."""

from __future__ import annotations

import numpy as np
import pytest

from pardnn.batch.batchscale import CostParts
from pardnn.batch.replicate import difference, replicate
from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.presets import preset
from pardnn.errors import ScalingError

V100 = preset("v100-32gb")
E = 1000  # elements of the weight and of each gradient (float32)


def two_copy_step(*, reader: str = "AddN", feeder: str = "VarHandleOp", cross: bool = False,
                  input_name: str = "micro_1/x") -> CostParts:
    """w (variable) -> micro_m/mul (reads micro_m/x) -> micro_m/grad -> sum (AddN) -> update; the last
    copy alone also runs micro_1/bn_update (shared: copy 0 has none), reading micro_1/mul."""
    rows = [  # name, type, kind, micro_batch, copy_of, comp_us, out_bytes, group
        ("w", feeder, Kind.RESIDUAL, -1, None, 0.0, 4 * E, "w"),
        ("micro_0/x", "Placeholder", Kind.NORMAL, 0, None, 0.0, 64, None),
        ("micro_0/mul", "MatMul", Kind.NORMAL, 0, None, 5.0, 4 * E, "micro_0/mul"),
        ("micro_0/grad", "MatMul", Kind.NORMAL, 0, None, 7.0, 4 * E, None),
        (input_name, "Placeholder", Kind.NORMAL, 1, 1, 0.0, 64, None),
        ("micro_1/mul", "MatMul", Kind.NORMAL, 1, 2, 5.0, 4 * E, "micro_1/mul"),
        ("micro_1/grad", "MatMul", Kind.NORMAL, 1, 3, 7.0, 4 * E, None),
        ("micro_batches/sum", reader, Kind.NORMAL, -1, None, 0.0, 4 * E, None),
        ("update", "AssignSub", Kind.REFERENCE, -1, None, 3.0, 0, "w"),
        ("micro_1/bn_update", "AssignMovingAvg", Kind.NORMAL, -1, None, 2.0, 16, None),
    ]
    names = [r[0] for r in rows]
    at = {name: i for i, name in enumerate(names)}
    edges = [("w", "micro_0/mul", 4 * E), ("w", "micro_1/mul", 4 * E), ("micro_0/x", "micro_0/mul", 64),
             (input_name, "micro_1/mul", 64), ("micro_0/mul", "micro_0/grad", 4 * E),
             ("micro_1/mul", "micro_1/grad", 4 * E), ("micro_0/grad", "micro_batches/sum", 4 * E),
             ("micro_1/grad", "micro_batches/sum", 4 * E), ("micro_batches/sum", "update", 4 * E),
             ("w", "update", 0), ("micro_1/mul", "micro_1/bn_update", 16)]
    if cross:
        edges.append(("micro_0/mul", "micro_1/grad", 8))
    # the sum: three tensors of E elements (two inputs, one output), 3 x 4E bytes moved
    moved = np.zeros(len(rows))
    moved[at["micro_batches/sum"]] = 3 * 4 * E
    sum_us = float(V100.kernel_us(E, 3 * 4 * E))
    comp = [sum_us if r[0] == "micro_batches/sum" else r[5] for r in rows]
    graph = CostGraph(
        names, comp, [r[6] for r in rows], [at[a] for a, _, _ in edges], [at[b] for _, b, _ in edges],
        [n for _, _, n in edges], kind=[int(r[2]) for r in rows], colocation=[r[7] for r in rows],
        ops=[r[1] for r in rows], micro_batch=[r[3] for r in rows], copy_of=[r[4] for r in rows], name="step")
    kernel = np.array([r[1] not in ("VarHandleOp", "Placeholder") for r in rows])
    counts = np.where(kernel, 1, 0)
    counts[at["micro_batches/sum"]] = 3
    terms = np.concatenate([np.full(c, E if names[v] == "micro_batches/sum" else 10.0) for v, c in enumerate(counts)])
    return CostParts(graph, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), terms, moved, kernel)


def test_four_copies_worked_out_by_hand():
    g = replicate(two_copy_step(), 4, V100)
    assert g.n == 4 + 4 * 3  # w, the sum, the update, the last copy's bn_update; three ops a copy
    for m in range(4):
        x, mul, grad = (g.index[f"micro_{m}/{op}"] for op in ("x", "mul", "grad"))
        assert {g.names[u] for u in g.predecessors(mul)} == {"w", f"micro_{m}/x"}
        assert g.predecessors(grad).tolist() == [mul]
        assert g.micro_batch[[x, mul, grad]].tolist() == [m, m, m]
        assert [g.names[c] for c in g.copy_of[[x, mul, grad]]] == ["micro_0/x", "micro_0/mul", "micro_0/grad"]
        assert g.group_names[g.colocation[mul]] == f"micro_{m}/mul"  # the group is renamed with its op
        assert g.comp_us[grad] == 7.0 and g.out_bytes[mul] == 4 * E
    total = g.index["micro_batches/sum"]
    assert sorted(g.names[u] for u in g.predecessors(total)) == [f"micro_{m}/grad" for m in range(4)]
    # five tensors of E floats now (four inputs and the output), memory-bound on a V100: 20 kB / 900 GB/s
    assert g.comp_us[total] == pytest.approx(20_000 / 900e9 * 1e6 + V100.launch_us, rel=1e-12)
    bn = g.index["micro_3/bn_update"]  # only the last copy runs it, and it stays with the last copy
    assert [g.names[u] for u in g.predecessors(bn)] == ["micro_3/mul"] and g.micro_batch[bn] == -1
    assert "micro_1/bn_update" not in g.index
    assert g.m == 2 + 4 * 4 + 1  # sum -> update, w -> update; four edges a copy; mul -> bn_update


def test_two_copies_give_the_step_back():
    parts = two_copy_step()
    assert difference(parts.graph, replicate(parts, 2, V100)) is None


def test_difference_names_what_differs():
    parts = two_copy_step()
    made = replicate(parts, 2, V100)
    slower = made.replace(comp_us=np.where(np.array(made.names) == "micro_1/grad", 8.0, made.comp_us))
    assert difference(parts.graph, slower) == "op 'micro_1/grad': comp_us 7.0 built, 8.0 made"
    assert "ops built" in difference(parts.graph, replicate(parts, 3, V100))


@pytest.mark.parametrize(("change", "message"), [
    ({"reader": "ConcatV2"},
     "op 'micro_batches/sum' (ConcatV2) of no micro-batch reads the copies' outputs and is not a sum"),
    ({"feeder": "Split"}, "op 'w' (Split) of no micro-batch splits a batch among the copies"),
    ({"cross": True}, "edge 'micro_0/mul' -> 'micro_1/grad' joins two micro-batches"),
    ({"input_name": "input_1"}, "op 'input_1' of micro-batch 1 has no 'micro_1' in its name"),
])
def test_steps_it_cannot_follow_are_refused_naming_the_op(change, message):
    with pytest.raises(ScalingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        replicate(two_copy_step(**change), 4, V100)


def test_a_step_of_other_than_two_copies_is_refused():
    parts = replicate(two_copy_step(), 3, V100)
    three = CostParts(parts, np.zeros(parts.n + 1, np.int64), np.zeros(0), np.zeros(parts.n), np.zeros(parts.n, bool))
    with pytest.raises(ScalingError, match="starts from a step of 2 micro-batches; this one has 3"):
        replicate(three, 4, V100)
    with pytest.raises(ValueError, match="micro must be >= 2"):
        replicate(two_copy_step(), 1, V100)
