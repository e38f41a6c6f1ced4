"""Helper processes (sim.offload): same bytes as in-process, failures surface."""

from __future__ import annotations

import hashlib
import os
import signal
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import simpy

from sim import offload
from sim.app.engine_config import EngineConfig
from sim.app.run import RunSpec, simulate
from sim.app.setup import resolve_run
from workloads import SyntheticWorkload, WorkloadSpec
from workloads.loader import workload_from_spec
from workloads.process import Prepared

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="helpers need os.fork")


class LinesFile:
    """A consumer writing each chunk (a list of ints) as one line."""

    def __init__(self, path: Path, fail_at: int | None = None) -> None:
        self.file = path.open("w")
        self.fail_at = fail_at
        self.n = 0
        self.closed = 0

    def write(self, chunk: list[int]) -> None:
        if self.n == self.fail_at:
            raise RuntimeError("consumer failed")
        self.n += 1
        self.file.write(" ".join(map(str, chunk)) + "\n")

    def close(self) -> None:
        self.closed += 1
        self.file.close()


@needs_fork
@pytest.mark.parametrize("fork", [False, True])
def test_chunk_writer_writes_every_chunk_in_order(tmp_path: Path, fork: bool) -> None:
    path = tmp_path / "out.txt"
    writer = offload.ChunkWriter(LinesFile(path), fork, "test")
    for i in range(300):
        writer.write(list(range(i, i + 50)))  # ~300 kB in all: the pipe fills
    writer.close()
    lines = path.read_text().splitlines()
    assert lines == [" ".join(map(str, range(i, i + 50))) for i in range(300)]


@needs_fork
def test_helpers_close_in_any_order(tmp_path: Path) -> None:
    """A helper forked after another does not keep the other's pipe open: the first
    one's close (EOF to its helper) returns while the second still runs."""
    first = offload.ChunkWriter(LinesFile(tmp_path / "a.txt"), True, "first")
    second = offload.ChunkWriter(LinesFile(tmp_path / "b.txt"), True, "second")
    first.write([1, 2])
    second.write([3])

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("the first helper never saw its pipe end")

    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)  # a helper that never sees EOF would hang the close
    try:
        first.close()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    second.close()
    assert (tmp_path / "a.txt").read_text() == "1 2\n"
    assert (tmp_path / "b.txt").read_text() == "3\n"


@needs_fork
@pytest.mark.parametrize("fork", [False, True])
def test_finish_ends_the_file_without_waiting(tmp_path: Path, fork: bool) -> None:
    """After ``finish`` the file is completed with no further call (by the helper, on
    its own; in process, at once), and ``close`` then only waits: the consumer is
    closed once."""
    path = tmp_path / "out.txt"
    consumer = LinesFile(path)
    writer = offload.ChunkWriter(consumer, fork, "test")
    for i in range(300):
        writer.write(list(range(i, i + 50)))
    writer.finish()
    want = "".join(" ".join(map(str, range(i, i + 50))) + "\n" for i in range(300))
    deadline = time.monotonic() + 30
    while path.read_text() != want and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path.read_text() == want
    writer.finish()  # again: nothing more
    writer.close()
    # Here once: at the fork (the helper owns the file), or by finish (close adds none).
    assert consumer.closed == 1
    assert path.read_text() == want


@needs_fork
def test_a_helper_failure_seen_by_a_write_is_not_reported_again(tmp_path: Path) -> None:
    """A write that finds the helper gone reaps it and raises; the close that follows
    (a run's cleanup) has nothing left to wait for and raises nothing."""
    writer = offload.ChunkWriter(LinesFile(tmp_path / "out.txt", fail_at=0), True, "test")
    with pytest.raises(offload.HelperFailed, match="test helper"):
        for i in range(2000):  # the helper dies at its first chunk; a later write sees it
            writer.write([i] * 1000)
    writer.close()


@needs_fork
def test_chunk_writer_reports_a_failed_helper(tmp_path: Path) -> None:
    writer = offload.ChunkWriter(LinesFile(tmp_path / "out.txt", fail_at=3), True, "test")
    with pytest.raises(offload.HelperFailed, match="test helper"):
        for i in range(2000):  # the helper dies at the 4th chunk; a write or close sees it
            writer.write([i] * 1000)
        writer.close()


def _numbers(n: int, fail_at: int | None = None) -> Iterator[list[int]]:
    for i in range(n):
        if i == fail_at:
            raise RuntimeError("producer failed")
        yield list(range(i * 100, i * 100 + 100))


@needs_fork
def test_chunk_reader_yields_every_chunk_then_stops() -> None:
    reader = offload.ChunkReader(lambda: _numbers(200), "test")
    got = []
    with pytest.raises(StopIteration):
        while True:
            got.append(reader.next())
    reader.close()
    assert got == list(_numbers(200))


@needs_fork
def test_chunk_reader_does_not_hide_a_failed_producer() -> None:
    reader = offload.ChunkReader(lambda: _numbers(50, fail_at=20), "test")
    got = []
    with pytest.raises(offload.HelperFailed, match="test helper"):
        while True:
            got.append(reader.next())
    assert len(got) == 20  # what came before the failure, then an error, not an end


@needs_fork
def test_chunk_reader_fails_on_a_chunk_cut_short() -> None:
    """A helper killed while it writes a chunk (larger than the pipe holds) is an error,
    not an end: its length came, its pickle did not."""
    import signal
    import time

    reader = offload.ChunkReader(lambda: iter([b"x" * (8 << 20)]), "test")
    time.sleep(0.3)  # the helper has written the length and blocks on the full pipe
    os.kill(reader._pid, signal.SIGKILL)
    with pytest.raises(offload.HelperFailed, match="test helper"):
        reader.next()
    assert reader._pipe is None


@needs_fork
def test_chunk_reader_close_stops_an_endless_producer() -> None:
    def endless() -> Iterator[list[int]]:
        i = 0
        while True:
            yield [i] * 1000
            i += 1

    reader = offload.ChunkReader(endless, "test")
    assert reader.next() == [0] * 1000
    pid = reader._pid
    reader.close()
    with pytest.raises(ChildProcessError):  # reaped: no such child any more
        os.waitpid(pid, os.WNOHANG)


def _nicer(niceness: int) -> int:
    """This process's niceness made ``niceness`` steps nicer (the kernel's cap: 19)."""
    return min(os.nice(0) + niceness, 19)


@needs_fork
def test_helpers_run_at_lower_priority_than_the_run() -> None:
    """Reader and writer helpers both: the niceness a helper reports (or writes) is the
    run's plus HELPER_NICENESS, while the run's own is unchanged."""
    before = os.nice(0)
    reader = offload.ChunkReader(lambda: iter([os.nice(0)]), "test")
    got = reader.next()
    reader.close()
    assert got == _nicer(offload.HELPER_NICENESS)
    assert os.nice(0) == before


@needs_fork
def test_a_writer_helper_runs_at_lower_priority(tmp_path: Path) -> None:
    class Niceness:
        def __init__(self, path: Path) -> None:
            self.path = path

        def write(self, chunk: Any) -> None:
            self.path.write_text(str(os.nice(0)))

        def close(self) -> None:
            pass

    writer = offload.ChunkWriter(Niceness(tmp_path / "nice"), True, "test")
    writer.write([1])
    writer.close()
    assert int((tmp_path / "nice").read_text()) == _nicer(offload.HELPER_NICENESS)


def test_allowed_respects_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(offload.ENV_SWITCH, "0")
    assert not offload.allowed()


def _open_loop(**overrides: Any) -> SyntheticWorkload:
    data: dict[str, Any] = {
        "arrival": {"type": "poisson", "rate": 5},
        "prompt_len": {"type": "uniform", "min": 5, "max": 900},
        "output_len": {"type": "uniform", "min": 1, "max": 20},
        "shared_prefix": {"num_groups": 3, "prefix_len": 40, "fraction": 0.5},
        "priority": {"values": [0, 1], "weights": [1, 3]},
        "num_requests": 1500,
        "seed": 3,
    }
    data.update(overrides)
    return workload_from_spec(WorkloadSpec.model_validate(data), "t", ".", "t.yaml", "t")


@needs_fork
def test_drawn_ahead_requests_equal_drawn_in_the_loop() -> None:
    def requests(workload: SyntheticWorkload, ahead: bool) -> list[tuple]:
        env = simpy.Environment()
        got: list[tuple] = []
        reader = None
        if ahead:
            drawn = workload.draw_ahead()
            assert drawn is not None
            reader = offload.ChunkReader(lambda: drawn, "workload")
        workload.start(env, lambda r: got.append(tuple(getattr(r, f) for f in r.FIELDS)), reader)
        env.run()
        if reader is not None:
            reader.close()
        return got

    assert requests(_open_loop(), True) == requests(_open_loop(), False)
    assert len(requests(_open_loop(), True)) == 1500
    assert _open_loop(sessions={"turns": 2, "think_time_s": 1.0}).draw_ahead() is None
    closed = {"type": "closed_loop", "concurrency": 2}
    assert _open_loop(arrival=closed).draw_ahead() is None


def _digest(out: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(out.iterdir()):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


@needs_fork
@pytest.mark.parametrize(
    ("workload", "replicas"), [("open", 1), ("open", 2), ("agent", 1)], ids=str
)
def test_simulate_with_helpers_writes_the_same_bytes(
    tmp_path: Path, workload: str, replicas: int
) -> None:
    digests = []
    for helpers in (False, True):
        if workload == "open":
            path = tmp_path / "open.yaml"
            path.write_text(
                "arrival: {type: poisson, rate: 30}\nprompt_len: {type: uniform, min: 20, "
                "max: 2000}\noutput_len: {type: uniform, min: 1, max: 400}\n"
                "num_requests: 2500\nseed: 4\n"
            )
            name = str(path)
        else:
            name = workload
        resolved = resolve_run(
            RunSpec(workload=name, model="llama-3.1-8b", gpu="a100-80gb", engine=EngineConfig())
        )
        out = tmp_path / f"out-{helpers}"
        out.mkdir()
        summary = simulate(resolved, out, decisions=True, num_replicas=replicas, helpers=helpers)
        summary.pop("wall_s")
        (out / "summary.txt").write_text(repr(summary))
        digests.append(_digest(out))
        # agent has sessions: it reacts to finishes and draws nothing ahead
        assert (resolved.workload._ahead is not None) == (helpers and workload == "open")
    assert digests[0] == digests[1]


def test_simulate_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    """The run collects seldom (thresholds raised, earlier objects frozen) and restores
    both: a caller's thresholds and frozen objects are as they were."""
    import gc

    spec = RunSpec(workload="chat", model="llama-3.1-8b", gpu="a100-80gb", engine=EngineConfig())
    before = gc.get_threshold()
    gc.set_threshold(1234, 5, 6)
    gc.disable()  # as `kvsim run` starts: collections on for the simulation, then off
    try:
        assert gc.get_freeze_count() == 0
        (tmp_path / "a").mkdir()
        seen: list[tuple[int, ...]] = []  # while the cluster was built, collections rare
        on: list[bool] = []
        simulate(
            resolve_run(spec),
            tmp_path / "a",
            helpers=False,
            on_cluster=lambda _: (seen.append(gc.get_threshold()), on.append(gc.isenabled())),
        )
        assert seen and seen[0][0] > 1234
        assert on == [True]
        assert not gc.isenabled()
        gc.enable()
        assert gc.get_threshold() == (1234, 5, 6)
        assert gc.get_freeze_count() == 0
        gc.freeze()  # a caller that froze its own objects keeps them frozen
        frozen = gc.get_freeze_count()
        (tmp_path / "b").mkdir()
        simulate(resolve_run(spec), tmp_path / "b", helpers=False)
        assert 0 < gc.get_freeze_count() <= frozen  # none thawed or added (some freed)
    finally:
        gc.enable()
        gc.unfreeze()
        gc.set_threshold(*before)


@needs_fork
@pytest.mark.parametrize(
    ("trace", "max_model_len", "replicas"),
    [
        ("examples/chat-trace.jsonl", None, 1),  # token ids, hash ids and lengths
        ("tests/data/llmservingsim/RTXPRO6000_Llama-3.1-8B/requests.jsonl", None, 2),
        ("tests/data/llmservingsim/RTXPRO6000_Llama-3.1-8B/requests.jsonl", 2048, 1),
    ],
    ids=["kvsim-jsonl", "llmservingsim-2-replicas", "with-rejected-prompts"],
)
def test_a_trace_drawn_ahead_writes_the_same_bytes(
    tmp_path: Path, trace: str, max_model_len: int | None, replicas: int
) -> None:
    """A trace's prompts built and hashed by a helper process give the same run, byte for
    byte (a prompt to be rejected is not built there: its length is sent instead)."""
    repo = Path(__file__).resolve().parents[1]
    digests = []
    for helpers in (False, True):
        resolved = resolve_run(
            RunSpec(
                workload=str(repo / trace), model="llama-3.1-8b", gpu="a100-80gb",
                engine=EngineConfig(max_model_len=max_model_len),
            )
        )  # fmt: skip
        out = tmp_path / f"out-{helpers}"
        out.mkdir()
        summary = simulate(resolved, out, decisions=True, num_replicas=replicas, helpers=helpers)
        summary.pop("wall_s")
        (out / "summary.txt").write_text(repr(summary))
        digests.append(_digest(out))
        if max_model_len is not None:
            assert summary["num_rejected"] > 0
    assert digests[0] == digests[1]


def test_prompts_travel_in_the_narrowest_array_that_holds_them() -> None:
    from array import array

    from workloads.tokens import token_typecode

    assert token_typecode(32000) == "H" and token_typecode(1 << 16) == "H"
    assert token_typecode(128256) == "I" and array("I").itemsize >= 4
    assert token_typecode(128256, explicit=True) == "q"
    ids = [0, 128255, 70000]
    assert array(token_typecode(128256), ids).tolist() == ids


@pytest.mark.parametrize(
    ("code", "ids"),
    [("H", [0, 31999, 65535, 7]), ("I", [0, 128255, 70000]), ("q", [5, -3, 1 << 62]), ("H", [])],
)
def test_token_array_packs_what_array_holds(code: str, ids: list[int]) -> None:
    """workloads.tokens.token_array (packed by struct) equals array(code, ids): the same
    type, items and bytes; out of range fails as array's would fail, not silently."""
    from array import array

    from workloads.tokens import token_array

    packed = token_array(code, ids)
    assert packed.typecode == code and packed == array(code, ids)
    assert packed.tobytes() == array(code, ids).tobytes()
    if code == "H":
        with pytest.raises((OverflowError, struct.error)):
            token_array(code, [1 << 16])


def test_a_trace_without_its_own_ids_sends_them_narrow(tmp_path: Path) -> None:
    """A kvsim JSONL trace of lengths only: two bytes a token on the workload pipe; one
    row with its own ids: eight."""
    from workloads.loader import load_workload

    lines = ['{"request_id": "a", "arrival_s": 0.1, "prompt_tokens": 40, "output_tokens": 3}']
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(lines) + "\n")
    mixed = tmp_path / "mixed.jsonl"
    lines.append(
        '{"request_id": "b", "arrival_s": 0.2, "prompt_token_ids": [5, 6, 7], "output_tokens": 3}'
    )
    mixed.write_text("\n".join(lines) + "\n")
    for path, code in ((short, "H"), (mixed, "q")):
        (chunk,) = list(load_workload(str(path)).draw_ahead(lambda req: Prepared([], 0)))
        assert {tail.typecode for _, tail, _ in chunk} == {code}


@pytest.mark.parametrize("kind", ["trace", "synthetic"])
def test_only_the_ids_after_the_hashed_blocks_travel(tmp_path: Path, kind: str) -> None:
    """A prompt drawn ahead sends its length, the hashes and the ids after the tokens
    they cover; the loop rebuilds it with placeholders where the hashes cover it, the
    same ids after them. Without hashes every id travels; a prompt to be rejected sends
    none."""
    from workloads.loader import load_workload
    from workloads.trace_rows import PLACEHOLDER_TOKEN_ID, prompt_after_hashed

    if kind == "trace":
        rows = [
            f'{{"request_id": "r{i}", "arrival_s": {i}, "prompt_tokens": {n}, "output_tokens": 2}}'
            for i, n in enumerate((40, 48, 7, 1000))
        ]
        path = tmp_path / "t.jsonl"
        path.write_text("\n".join(rows) + "\n")
        load = lambda: load_workload(str(path))  # noqa: E731
    else:
        load = lambda: _open_loop(num_requests=60)  # noqa: E731
    full = [item for chunk in load().draw_ahead() for item in chunk]
    seen: list[tuple[int, int]] = []

    def prepare(req: Any) -> Prepared | None:
        if req.num_prompt_tokens >= 900:
            return None  # to be rejected: nothing drawn
        covered = req.num_prompt_tokens // 16 * 16
        seen.append((req.num_prompt_tokens, covered))
        return Prepared([("hash", covered)], covered)

    ahead = [item for chunk in load().draw_ahead(prepare) for item in chunk]
    assert len(ahead) == len(full) and seen
    for whole, sent in zip(full, ahead):
        n, ids = whole[0], whole[1].tolist()
        assert sent[0] == n and len(ids) == n
        if n >= 900:
            assert sent[1] is None and sent[-1] is None
            continue
        covered = n // 16 * 16
        assert sent[1].tolist() == ids[covered:] and sent[-1] == [("hash", covered)]
        rebuilt = prompt_after_hashed(n, sent[1])
        assert rebuilt == [PLACEHOLDER_TOKEN_ID] * covered + ids[covered:]
    assert kind != "trace" or any(n >= 900 for n, *_ in full)  # the trace's last row
