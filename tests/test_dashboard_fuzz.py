"""Hostile URLs and uploads against every page (AppTest): never an exception or a traceback,
a message naming the parameter or field, and bounded time. Runs in well under a minute."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
# one GPU unless a case needs hosts: what is checked is the message, and a plan on one GPU
# takes milliseconds, so a loaded machine cannot push a case past its bound
ONE_GPU = "build:nodes=1,gpus=1,nics=1"
TWO_HOSTS = "dgx-a100:2"
BASE = {"model": "gpt2", "topo": ONE_GPU, "batch": "8", "seq": "256"}
SECONDS = 30  # one hostile run, its search included (the bound the test asserts)
HANG = 180  # AppTest's own timeout: only a hang should reach it, not a slow machine


def said(at: AppTest) -> str:
    """Every warning, error and info box shown, on this run and the session's first."""
    shown = " ".join(e.value for e in (*at.warning, *at.error, *at.info))
    return (
        at.session_state["_fuzz_first"] + " " + shown
        if "_fuzz_first" in at.session_state
        else shown
    )


def run(page: str, **params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=HANG)
    at.query_params.update({**BASE, **params})
    start = time.perf_counter()
    at.run()
    assert not at.exception, at.exception[0].message
    at.session_state["_fuzz_first"] = said(at)  # URL warnings show on the first run only
    if page != "plan":
        at.switch_page(f"app_pages/{page}.py").run()
    assert time.perf_counter() - start < SECONDS
    assert not at.exception, at.exception[0].message
    return at


@pytest.mark.parametrize(
    ("page", "params", "word"),
    [
        ("links", {"top": "300"}, "top="),
        ("links", {"top": "-4"}, "top="),
        ("how_it_works", {"size": "1000"}, "size="),
        ("how_it_works", {"size": "nan"}, "size="),
        ("sweep", {"points": "99", "bw_lo": "-1", "bw_hi": "1e400"}, "points="),
        ("plan", {"batch": "1e400"}, "batch="),
        ("plan", {"batch": "9" * 400}, "batch="),
        ("plan", {"seq": "-3", "mem": "inf"}, "seq="),
        ("plan", {"net": "1e9", "topo": TWO_HOSTS}, "net="),
        ("plan", {"topo": "build:nodes=64,gpus=1000000"}, "gpus"),
        ("plan", {"topo": "build:nodes=2,nic_GBps=-1"}, "nic_GBps"),
        ("plan", {"topo": "dgx-a100:100000"}, "nodes"),
        ("plan", {"topo": "dgx-a100:two"}, "topo="),
        ("plan", {"topo": "json"}, "topo="),
        ("topology", {"edits": "n0.nic0~net:bw=abc", "topo": TWO_HOSTS}, "edits"),
        ("topology", {"edits": ";".join(["+host"] * 500)}, "edits"),
        ("plan", {"model": "upload", "batch": "3"}, "uploaded config.json"),
        ("plan", {"model": "../../etc/passwd"}, "model="),
        ("compare", {"baseline": "alpa", "cmp_expand": "2"}, "baseline="),
        ("sweep", {"curves": "taps,alpa"}, "curves="),
        ("plan", {"fmt": "gif", "expand": "yes"}, "fmt="),
        ("plan", {"topo": "x" * 5000}, "topo"),
    ],
)
def test_hostile_url_values_give_a_message(page, params, word):
    at = run(page, **params)
    assert word in said(at), said(at)


def test_batch_that_does_not_split_over_the_hosts_is_planned():
    """5 hosts and a batch of 8: no data parallelism across all of them, but a plan (pipeline
    stages, or other dims split across hosts) instead of a refusal."""
    at = run("plan", edits="+host;+host;+host", topo=TWO_HOSTS)
    assert not at.error, [e.value for e in at.error]
    assert any("ms" in m.value for m in at.metric), [m.value for m in at.metric]


def test_refused_cluster_does_no_work():
    start = time.perf_counter()
    at = run("plan", topo="build:nodes=64,gpus=1000000")
    assert time.perf_counter() - start < 10
    assert at.session_state["topo"] == "dgx-a100"  # the default cluster is planned instead


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            k: st.text(max_size=30)
            for k in ("batch", "seq", "mem", "net", "top", "points", "topo", "edits", "mode")
        },
    )
)
def test_random_url_values_never_raise(params):
    at = AppTest.from_file(APP, default_timeout=HANG)
    at.query_params.update({**BASE, **{k: v for k, v in params.items() if v}})
    at.run()
    assert not at.exception, at.exception[0].message


def upload(at: AppTest, key: str, name: str, data: bytes) -> AppTest:
    at.file_uploader(key=key).set_value((name, data, "application/json"))
    at.run()
    assert not at.exception, at.exception[0].message
    return at


GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100}


@pytest.mark.parametrize(
    ("data", "word"),
    [
        (b"\xff\xfe not utf-8", "UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nesting depth"),
        (b"{" + b" " * (2 * 2**20) + b"}", "size"),
        (json.dumps({**GPT2, "n_layer": 1_000_000}).encode(), "layers"),
        (json.dumps({**GPT2, "n_layer": 10**400}).encode(), "layers"),
        (json.dumps({**GPT2, "n_embd": "wide"}).encode(), ""),
        (json.dumps({"model_type": "gpt2", "torch_dtype": ["x"]}).encode(), ""),
    ],
)
def test_hostile_model_uploads(data, word):
    at = run("plan")
    at = upload(at, "model_file", "evil.json", data)
    message = said(at)
    assert at.error, "a bad config is an error box"
    assert word.lower() in message.lower() or word == "", message


@pytest.mark.parametrize(
    ("data", "word"),
    [
        (b"\xff", "input"),
        (b"[" * 50_000, "nesting depth"),
        (b'{"format": "taps-topology/1", "name": 5}', "topology"),
        (b"{" + b" " * (40 * 2**20) + b"}", "size"),
    ],
)
def test_hostile_topology_uploads(data, word):
    at = run("topology")
    at = upload(at, "topo_file", "evil.json", data)
    assert word in said(at), said(at)


def test_a_negative_bandwidth_is_refused_not_clamped():
    at = run("plan", topo=TWO_HOSTS, net="-5")
    words = said(at)
    assert "net='-5' ignored" in words and "positive" in words, words
    assert "clamped" not in words
    at = run("plan", topo=TWO_HOSTS, net="1e9")  # too large but real: clamped, as before
    assert "net='1e9' clamped" in said(at)
