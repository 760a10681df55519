"""Memory heuristic I over several rounds: cases built to need R + 1 >= 3 rounds, which it must solve.

The *cascade* (worked by hand for R = 2 in the first test): a chain of devices 0..R, each limited to
``L`` bytes, and a spare device S whose limit is exactly the output of one op x.

- device 0 holds the residual r0 and x (``X`` bytes, runs at t = 0): ``r0 + X = L + o0``;
- device i (1..R) holds the residual r_i, an empty op z_i (2 us) and y_i (``Y_i`` bytes, 10 us, runs
  from t = 2): ``r_i + Y_i = L + o_i``, with overflows ``o0 >= o1 >= ... >= oR`` (worst first, ties
  to the lower device, so each round handles the devices in chain order);
- the sizes fit exactly once shifted: ``r0 + r1 = L``, ``Y_i + r_{i+1} = L``, ``Y_R = L`` (so
  ``r_R = o_R``), and S holds x alone;
- ``L > 2 r1 + o0``, so that ``X < r0`` and ``X < Y_i``.

Round 1: r0 fits nowhere (every chain device overflows, S holds less than r0); x goes to S, the
device of lowest peak with room at t = 0, which fills S for the rest of the round, so no r_i
follows it there; no y_i fits anywhere at t = 2 (device 0 holds r0 and ``r0 + Y_i > L``). Round 2:
device 0 holds r0 alone, so r1 moves there and fills it (``r0 + r1 = L``). Round i + 1: device i - 1
holds Y_{i-1} alone, so r_i moves there and fills it; every other device is full or overflows, and
S is full all step (its peak is x's X). So each round moves one unit and frees the room the next
round needs: R + 1 rounds, every limit met exactly. The limits are the peaks of that final
placement, as in ``feasible_limit``: a placement that fits is known.
"""

from __future__ import annotations

import numpy as np
from hypothesis import event, given, target
from hypothesis import strategies as st

from pardnn import CostGraph, Machine
from pardnn.emulation.simulate import evaluate
from pardnn.steps.overflow import _pick_target, handle_overflow
from tests.conftest import most_reach, reached

LINK = {"bandwidth": 1e6, "latency": 1.0, "reserve": 0.0}


def cascade(limit: int, overflows: list[int]) -> tuple[CostGraph, np.ndarray, np.ndarray]:
    """The cascade for R = ``len(overflows) - 1``: the graph, the start placement and the placement that
    fits (device R + 1 is S). Ops: r0, x, then per chain device i: r_i, z_i, y_i. ``r_R = o_R``, so
    that device R ends at ``L`` too."""
    chain = len(overflows) - 1
    residual = [sum(overflows[1:])]  # r_1; then r_{i+1} = r_i - o_i
    for i in range(1, chain):
        residual.append(residual[-1] - overflows[i])
    r0 = limit - residual[0]
    names, comp, out, kind = ["r0", "x"], [0.0, 1.0], [r0, residual[0] + overflows[0]], ["residual", "normal"]
    start, fits = [0, 0], [0, chain + 1]
    for i in range(1, chain + 1):
        r = residual[i - 1]
        names += [f"r{i}", f"z{i}", f"y{i}"]
        comp += [0.0, 2.0, 10.0]
        out += [r, 0, limit + overflows[i] - r]
        kind += ["residual", "normal", "normal"]
        start += [i, i, i]
        fits += [i - 1, i, i]
    src = [3 + 3 * i for i in range(chain)]  # z_i -> y_i
    g = CostGraph(names, comp, out, src, [s + 1 for s in src], kind=kind, name=f"cascade-{chain}")
    return g, np.array(start), np.array(fits)


def limits_of(g: CostGraph, placement: np.ndarray, devices: int) -> Machine:
    """A machine whose every device holds exactly its peak under ``placement``, which therefore fits."""
    peaks = evaluate(g, Machine(devices, **LINK), placement).peak_memory_bytes
    return Machine(devices, memory=[f"{max(p, 1)}B" for p in peaks], **LINK)


def test_a_cascade_of_two_needs_three_rounds():
    """L = 100, overflows 5, 5, 5: r2 = o2 = 5, r1 = r2 + o1 = 10, r0 = 90, x 15 B, y1 = 95 B, y2 = 100 B; S holds 15 B.
    Start: device 0 holds 90 + 15 = 105 at t = 0; device 1 10 + 95 = 105 and device 2 5 + 100 = 105 from
    t = 2. Round 1: x to S (moves (1, 0, 3)). Round 2: device 0 holds 90, r1 (10) fits it: (2, 1, 0).
    Round 3: device 1 holds 95, r2 (5) fits it: (5, 2, 1). Then every device is at its limit:
    100, 100, 100 and S 15."""
    g, start, fits = cascade(100, [5, 5, 5])
    machine = limits_of(g, fits, 4)
    assert machine.limits_bytes.tolist() == [100, 100, 100, 15]
    assert evaluate(g, machine, start).peak_memory_bytes == [105, 105, 105, 0]
    result = handle_overflow(g, machine, start)
    assert result.rounds == 3 and result.moves == [(1, 0, 3), (2, 1, 0), (5, 2, 1)]
    assert result.placement.tolist() == fits.tolist()
    assert evaluate(g, machine, result.placement).peak_memory_bytes == [100, 100, 100, 15]


@st.composite
def cascades(draw: st.DrawFn) -> tuple[int, list[int]]:
    """R in 2..7, overflows falling, L above 2 r1 + o0."""
    chain = draw(st.integers(2, 7))
    overflows = sorted(draw(st.lists(st.integers(1, 40), min_size=chain + 1, max_size=chain + 1)), reverse=True)
    limit = draw(st.integers(2 * sum(overflows[1:]) + overflows[0] + 1, 10**7))
    return limit, overflows


@given(cascades())
def test_heuristic_one_solves_every_cascade_in_one_round_per_link(case):
    limit, overflows = case
    chain = len(overflows) - 1
    g, start, fits = cascade(limit, overflows)
    machine = limits_of(g, fits, chain + 2)
    assert evaluate(g, machine, fits).memory_fits and not evaluate(g, machine, start).memory_fits
    result = handle_overflow(g, machine, start)
    event(f"{result.rounds} rounds")
    target(float(result.rounds), label="rounds")
    assert result.rounds == chain + 1 >= 3
    assert result.placement.tolist() == fits.tolist()
    assert evaluate(g, machine, result.placement).memory_fits


@st.composite
def target_cases(draw):
    """One unit's move off ``device``: every device's limit, peak, use at the overflow instant and
    this round's arrivals, the unit's potential, residual bytes, copies per device and crossing edges.
    Small integers, so ties in communication and in peak are common."""
    k = draw(st.integers(2, 6))
    ints = st.integers(0, 6)
    limits = np.array(draw(st.lists(st.integers(4, 12), min_size=k, max_size=k)), np.int64)
    peak = np.array(draw(st.lists(ints, min_size=k, max_size=k)), np.int64)
    usage = np.array(draw(st.lists(ints, min_size=k, max_size=k)), np.int64)
    reserved = np.array(draw(st.lists(st.integers(0, 3), min_size=k, max_size=k)), np.int64)
    always = np.array(draw(st.lists(st.integers(0, 3), min_size=k, max_size=k)), np.int64)
    pot = draw(st.floats(0, 8, allow_nan=False))
    res = float(draw(st.sampled_from([0, 0, 1, 3, 9])))
    copies = np.array(draw(st.lists(st.floats(0, 3, allow_nan=False), min_size=k, max_size=k)))
    ends = draw(st.lists(st.tuples(st.integers(0, 7), st.sampled_from([0.5, 1.0, 2.0])), max_size=6))
    place = np.array(draw(st.lists(st.integers(0, k - 1), min_size=8, max_size=8)), np.int64)
    device = draw(st.integers(0, k - 1))
    return k, device, limits, peak, usage, reserved, always, pot, res, copies, ends, place


def _target_by_the_rule(case) -> int:
    """Heuristic I's target (docs/notes-partitioner.md, overflow, "Target device"), restated: the devices other than the
    source with room for the potential less the copies from there (whole bytes) on top of their use
    and arrivals, and, for a unit with residual bytes, room for those on top of their peak and arrivals;
    among them the most communication, then the lowest peak with arrivals, then the lowest index."""
    k, device, limits, peak, usage, reserved, always, pot, res, copies, ends, place = case
    comm = [0.0] * k
    for other, cost in ends:
        comm[int(place[other])] += cost
    room = [d for d in range(k) if d != device
            and usage[d] + reserved[d] + int(pot) - int(copies[d]) <= limits[d]
            and (res == 0 or res <= limits[d] - peak[d] - always[d])]
    return min(room, key=lambda d: (-comm[d], peak[d] + reserved[d], d), default=-1)


@most_reach
@given(target_cases())
def test_the_compiled_target_choice_follows_the_rule(case):
    _k, device, limits, peak, usage, reserved, always, pot, res, copies, ends, place = case
    edge_ptr = np.array([0, len(ends)], np.int64)
    other = np.array([e[0] for e in ends], np.int64)
    comm = np.array([e[1] for e in ends], np.float64)
    chosen = _pick_target(0, device, limits, peak, usage, reserved, always, pot, res, copies, place, edge_ptr,
                          other, comm)
    expected = _target_by_the_rule(case)
    reached(expected >= 0, "some device can hold the unit")
    assert chosen == expected
