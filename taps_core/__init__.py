"""TAPS Planner engine: topology-aware search for intra-operator parallelism strategies.

Typical use::

    from taps_core import build_graph, load_model_config, preset, search
    plan = search(build_graph(load_model_config("gpt2")), preset("dgx-a100:2"))
"""

from taps_core.errors import InfeasibleError, InvalidInputError, TapsError
from taps_core.models import build_graph, load_model_config, sample_names
from taps_core.plan import Plan
from taps_core.presets import preset
from taps_core.search.baselines import NotFitting, compare
from taps_core.search.planner import search
from taps_core.topology import Topology, build_cluster
from taps_core.topology_io import load_topology

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
