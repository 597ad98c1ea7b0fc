"""TAPS Planner engine: topology-aware search for intra-operator parallelism strategies.

Typical use::

    from taps_core import build_graph, load_model_config, preset, search
    plan = search(build_graph(load_model_config("gpt2")), preset("dgx-a100:2"))
"""

from taps_core.cluster.io import load_topology
from taps_core.cluster.presets import preset
from taps_core.cluster.topology import Topology, build_cluster
from taps_core.errors import InfeasibleError, InvalidInputError, TapsError
from taps_core.models import build_graph, load_model_config, sample_names
from taps_core.plan.records import NotFitting, Plan
from taps_core.search.baselines import compare
from taps_core.search.planner import search

__all__ = [
    "InfeasibleError",
    "InvalidInputError",
    "NotFitting",
    "Plan",
    "TapsError",
    "Topology",
    "build_cluster",
    "build_graph",
    "compare",
    "load_model_config",
    "load_topology",
    "preset",
    "sample_names",
    "search",
]
