"""Stall detection: the timeout rule, heartbeat files, and the watchdog's verdicts on a fake clock."""

from __future__ import annotations

import json

import pytest

from launcher.rank.heartbeat import STARTUP_SECONDS, Heartbeat, Watchdog, read_heartbeat, stall_timeout


@pytest.mark.parametrize(("setting", "steps", "timeout"), [
    (None, [], STARTUP_SECONDS), (20.0, [], STARTUP_SECONDS), (4000.0, [], 4000.0),  # before the first iteration
    (None, [0.01] * 10, 60.0), (None, [10.0, 1.0, 10.0], 200.0), (20.0, [10.0], 20.0),
])
def test_stall_timeout(setting, steps, timeout):
    assert stall_timeout(setting, steps) == timeout


def test_heartbeat_is_rewritten_in_place_and_read_back(tmp_path):
    beat = Heartbeat(tmp_path, 1, "node-b")
    beat.write(iteration=7)
    beat.write(iteration=8, status="stalled")
    record = read_heartbeat(tmp_path / "heartbeat-1.json")
    assert (record["rank"], record["node"], record["iteration"], record["status"]) == (1, "node-b", 8, "stalled")
    assert (tmp_path / "heartbeat-1.json").stat().st_size == 1024
    (tmp_path / "heartbeat-2.json").write_text('{"rank": 2, "be')  # torn mid-write
    assert read_heartbeat(tmp_path / "heartbeat-2.json") is None and read_heartbeat(tmp_path / "nope.json") is None


class World:
    """Rank 0's watchdog on a fake clock, and rank 1's heartbeat written by the test."""

    def __init__(self, tmp_path, setting=20.0) -> None:
        self.now = 0.0
        self.count, self.steps = 0, [0.01] * 40
        self.peer = Heartbeat(tmp_path, 1, "node-b")
        self.peer_beat = 0
        self.stalls = []
        self.watchdog = Watchdog(Heartbeat(tmp_path, 0, "node-a"), ["node-a", "node-b"], setting,
                                 lambda: (self.count, len(self.steps), "train"), lambda: self.steps,
                                 self.stalls.append, clock=lambda: self.now)

    def tick(self, *, mine: bool = True, peer_beats: bool = True, peer_progresses: bool = True):
        self.now += 1.0
        if mine:
            self.count += 1
            self.steps.append(0.01)
        if peer_beats:
            self.peer_beat += 1
            self.peer.write(beat=self.peer_beat, progress=self.peer_beat if peer_progresses else 0,
                            iteration=len(self.steps) - 1)
        return self.watchdog.poll()


def test_no_stall_while_any_rank_progresses(tmp_path):
    world = World(tmp_path)
    assert all(world.tick() is None for _ in range(30))
    # this rank waits (for instance in a collective) while its peer still works through a phase
    assert all(world.tick(mine=False) is None for _ in range(60))
    written = json.loads((tmp_path / "heartbeat-0.json").read_text())
    assert (written["rank"], written["iteration"], written["phase"]) == (0, 69, "train")


def test_a_silent_peer_is_named_with_its_last_iteration(tmp_path):
    world = World(tmp_path)
    for _ in range(10):
        world.tick()
    verdicts = [world.tick(mine=False, peer_beats=False) for _ in range(25)]
    stall = next(v for v in verdicts if v is not None)
    assert verdicts.index(stall) >= 19  # 20 s without progress on any rank
    assert (stall.ranks, stall.silent, stall.leader) == ((1,), (1,), 0)
    assert "rank 1 (node node-b) last seen at iteration 49 stopped responding" in stall.message
    assert "rank 0 (node node-a) at iteration 49 waits" in stall.message
    assert stall.message.startswith("no iteration completed on any rank for 20 s")


def test_every_rank_alive_but_none_progressing_names_the_ranks_behind(tmp_path):
    world = World(tmp_path)
    for _ in range(5):
        world.tick()
    stall = next(v for v in (world.tick(mine=False, peer_progresses=False) for _ in range(25)) if v is not None)
    assert stall.silent == () and stall.ranks == (0, 1) and stall.leader == 0
    assert "every rank's heartbeat is alive" in stall.message


def test_a_process_that_was_frozen_does_not_judge_what_it_saw_before(tmp_path):
    world = World(tmp_path)
    world.tick()
    world.now += 100.0  # SIGSTOP, then SIGCONT: nothing moved for 100 s on this rank's clock
    assert world.tick(mine=False, peer_beats=False) is None
    assert world.watchdog.silent() == []


def test_before_the_first_iteration_the_startup_timeout_applies(tmp_path):
    world = World(tmp_path, setting=20.0)
    world.steps = []
    assert all(world.tick(mine=False, peer_progresses=False) is None for _ in range(200))


def test_stall_timeout_zero_never_stalls_but_keeps_beating(tmp_path):
    world = World(tmp_path, setting=0.0)
    assert all(world.tick(mine=False, peer_beats=False) is None for _ in range(100))
    assert json.loads((tmp_path / "heartbeat-0.json").read_text())["beat"] == 100


def test_after_close_peers_are_judged_as_of_the_last_round(tmp_path):
    world = World(tmp_path)
    world.tick()
    world.watchdog.close()
    world.now += 1000.0
    assert world.watchdog.silent() == []
