"""The bounded memo shared by a process's searches: it keeps the most recently used results,
computes each missing key once per call and refuses a size that holds nothing."""

from __future__ import annotations

import pytest

from taps_core.memo import LruMemo


def test_keeps_the_most_recently_used_entries():
    memo: LruMemo[int] = LruMemo(2)
    calls = []

    def compute(x: int):
        return lambda: calls.append(x) or x * 10

    assert memo.get_or("a", compute(1)) == 10
    assert memo.get_or("b", compute(2)) == 20
    assert memo.get_or("a", compute(99)) == 10  # kept: not computed again
    memo.get_or("c", compute(3))  # evicts "b", the least recently used
    assert len(memo) == 2
    assert memo.get_or("b", compute(4)) == 40
    assert calls == [1, 2, 3, 4]


def test_refuses_a_memo_that_holds_nothing():
    with pytest.raises(ValueError, match="max_entries"):
        LruMemo(0)


def test_clear_all_empties_every_memo_of_the_process():
    """What a benchmark calls to time a search as a fresh process runs it."""
    from taps_core.memo import clear_all

    memo: LruMemo[int] = LruMemo(4)
    memo.get_or("a", lambda: 1)
    clear_all()
    assert len(memo) == 0


def test_a_graph_built_twice_has_one_content_and_prices_alike_warm_or_cold():
    """Equal graphs (a sweep's jobs each unpickle theirs) share the process's pricing memo; a
    plan priced at another link speed with the memo warm equals the same plan priced cold."""
    import pickle

    from taps_core.cluster.links import LinkModel
    from taps_core.cluster.presets import preset
    from taps_core.cluster.topology import scale_inter_bandwidth
    from taps_core.memo import clear_all
    from taps_core.models import build_graph, load_model_config
    from taps_core.plan.evaluate import evaluate, pricing_memo
    from taps_core.search.planner import search

    cfg = load_model_config("gpt2").with_workload(batch_size=16, seq_length=128)
    graph = build_graph(cfg)
    again = pickle.loads(pickle.dumps(graph))
    assert graph.content == again.content and hash(graph.content) == hash(again.content)
    other = build_graph(cfg.with_workload(batch_size=32, seq_length=128))
    assert graph.content != other.content
    topology = preset("dgx-a100:2")
    assert pricing_memo(graph, topology, "train") is pricing_memo(again, topology, "train")
    assert pricing_memo(graph, topology, "train") is not pricing_memo(graph, topology, "infer")

    plan = search(graph, topology)
    slow = LinkModel(scale_inter_bandwidth(topology, 2e9))

    def priced():
        return evaluate(again, slow, "train", plan.choices, label="x", cost_model="topology",
                        search=plan.search, memory_limit_bytes=plan.memory_limit_bytes,
                        microbatches=plan.microbatches)

    warm = priced()
    clear_all()
    cold = priced()
    assert warm.total_time_s == cold.total_time_s and warm.memory == cold.memory
    assert warm.total_time_s > plan.total_time_s  # the slower network is priced as such


def test_a_byte_bound_drops_the_least_recently_used_values():
    memo: LruMemo[bytes] = LruMemo(100, max_bytes=10, size=len)
    memo.get_or("a", lambda: b"x" * 6)
    memo.get_or("b", lambda: b"y" * 3)
    memo.get_or("a", lambda: b"")  # "a" used last
    memo.get_or("c", lambda: b"z" * 3)  # 12 bytes: "b" goes
    assert len(memo) == 2 and memo.nbytes == 9
    memo.get_or("d", lambda: b"w" * 50)  # larger than the bound alone: kept, the rest go
    assert len(memo) == 1 and memo.nbytes == 50
    memo.put("d", b"v" * 4)  # a value replaced counts its new size only
    assert memo.nbytes == 4
    memo.clear()
    assert memo.nbytes == 0


def test_graph_content_unpickled_in_another_process_equals_its_own(tmp_path):
    """String hashes differ between processes: a graph pickled with its content computed (a
    sweep job's) is hashed again where it is read, so it finds what that process computed."""
    import os
    import pickle
    import subprocess
    import sys

    from taps_core.models import build_graph, load_model_config

    cfg = load_model_config("gpt2").with_workload(batch_size=8, seq_length=64)
    graph = build_graph(cfg)
    _ = graph.content  # computed here, pickled with the graph
    path = tmp_path / "graph.pkl"
    path.write_bytes(pickle.dumps(graph))
    check = (
        "import pickle, sys\n"
        "from taps_core.models import build_graph, load_model_config\n"
        "g = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "cfg = load_model_config('gpt2').with_workload(batch_size=8, seq_length=64)\n"
        "own = build_graph(cfg)\n"
        "assert g.content == own.content and hash(g.content) == hash(own.content)\n"
        "assert {g.content: 1}.get(own.content) == 1\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run([sys.executable, "-c", check, str(path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
