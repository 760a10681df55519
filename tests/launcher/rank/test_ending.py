"""Ending early without a collective: each rank's files, the leader's merge, the others' wait, status.json."""

from __future__ import annotations

import json
import threading

from launcher.rank.ending import Finisher, merge_figures, read_figures, write_figures, write_status
from launcher.rank.heartbeat import Heartbeat


class Files:
    """A RunFiles that records what the finisher asked for (and writes the figures file like the run does)."""

    def __init__(self, directory, rank) -> None:
        self.directory, self.rank = directory, rank
        self.calls = []

    def flush_rank(self, status, message):
        write_figures(self.directory, self.rank, status, {"job": "j"}, {"rank": self.rank, "iterations_run": 5})
        self.calls.append(("rank", status))

    def write_run(self, status, message, figures, missing, exit_code):
        self.calls.append(("run", status, [f["rank"] for f in figures], missing, exit_code))


def _finisher(tmp_path, rank, size, **options):
    files = Files(tmp_path, rank)
    finisher = Finisher(files, Heartbeat(tmp_path, rank, f"n{rank}"), size, live=lambda: list(range(size)),
                        poll=0.01, **options)
    return finisher, files


def test_the_leader_merges_every_ranks_figures_after_they_are_final(tmp_path):
    leader, leader_files = _finisher(tmp_path, 0, 2, deadline=30.0)
    other, other_files = _finisher(tmp_path, 1, 2, deadline=30.0)
    announced = []
    threads = [threading.Thread(target=f.finish, args=("time_limit", "stopped", 143),
                                kwargs={"announce": announced.append}) for f in (leader, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert leader_files.calls == [("rank", "time_limit"), ("run", "time_limit", [0, 1], [], 143)]
    assert other_files.calls == [("rank", "time_limit")]  # it waited for the leader's run files
    assert sorted(announced) == [False, True] and leader.leader == other.leader == 0
    beat = json.loads((tmp_path / "heartbeat-0.json").read_text())
    assert beat["files_final"] and beat["run_files"] and beat["status"] == "time_limit"


def test_a_missing_rank_is_waited_for_until_the_deadline_then_left_out(tmp_path):
    leader, files = _finisher(tmp_path, 0, 3, deadline=0.2)
    leader.finish("stalled", "rank 2 stopped", 4, leader=0)
    assert files.calls[-1] == ("run", "stalled", [0], [1, 2], 4)
    leader.finish("time_limit", "later signal", 143)  # once per run
    assert len(files.calls) == 2 and leader.ended == ("stalled", "rank 2 stopped") and leader.wait(0)


def test_status_and_figures_files(tmp_path):
    write_status(tmp_path, "failed", message="boom", rank=1, node="b", exit_code=1)
    status = json.loads((tmp_path / "status.json").read_text())
    assert {k: status[k] for k in ("status", "message", "rank", "node", "exit_code")} == {
        "status": "failed", "message": "boom", "rank": 1, "node": "b", "exit_code": 1}
    assert status["time"].endswith("Z")
    write_figures(tmp_path, 1, "running", {"job": "j"}, {"rank": 1})
    (tmp_path / "figures-2.json").write_text("{not json")
    assert read_figures(tmp_path, 1)["status"] == "running" and read_figures(tmp_path, 2) is None
    figures, missing = merge_figures(tmp_path, 3)
    assert [f["rank"] for f in figures] == [1] and figures[0]["figures_status"] == "running" and missing == [0, 2]
