"""Turn (model graph, topology, mode, cost model) into a :class:`CostGraph` to solve.

Every op is a node whose strategies are its shardings; every op output that is read by another
op gets a *tensor node* whose strategies are the layouts its producer can emit. The producer's
edge to it selects (0 for the layout a strategy emits, +inf otherwise); each consumer's edge
costs the resharding from the tensor's layout to the layout that consumer wants. This keeps
edges small (layouts are far fewer than strategies) and makes fan-out exact: one layout, each
consumer paying its own conversion. Costs of identical ops are computed once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from taps_core.collectives import CommCost
from taps_core.costs import OpCost, Resharder, op_cost
from taps_core.graph import OpGraph, OpSpec
from taps_core.solver.problem import CostGraph
from taps_core.strategies import Layout, Mesh, SearchSpace, Strategy, op_strategies
from taps_core.topology import Topology

StrategyFilter = Callable[[OpGraph, OpSpec, Strategy], bool]
TENSOR_PREFIX = "tensor:"


def op_signature(graph: OpGraph, op: OpSpec) -> tuple:
    """Everything that determines an op's strategies and costs (not its name or layer)."""
    specs = tuple(
        (t.shape, t.dtype_bytes, t.is_param, t.tied, t.requires_grad)
        for t in (graph.tensors[n] for n in (*op.inputs, op.output))
    )
    readers = tuple(len(graph.consumers.get(n, ())) for n in op.inputs)  # activation sharing
    return (
        op.kind,
        op.einsum,
        specs,
        readers,
        op.fixed,
        op.stat_letters,
        op.tp_role,
        op.flops_factor,
        op.fwd_flops,
    )


@dataclass
class SearchProblem:
    """Strategies, costs and the tensor-node structure of one planning run.

    ``time`` and ``memory`` hold each node's per-strategy seconds and bytes per device, so the
    memory multiplier can be changed without recomputing anything.
    """

    graph: OpGraph
    topology: Topology
    mesh: Mesh
    mode: str
    strategies: dict[str, list[Strategy]]
    layouts: dict[str, list[Layout]]  # tensor node -> its layouts
    time: dict[str, np.ndarray]
    memory: dict[str, np.ndarray]
    edges: list[tuple[str, str, np.ndarray]]
    op_costs: dict[str, list[OpCost]] = field(default_factory=dict)

    def cost_graph(self, memory_weight: float = 0.0, nodes: set[str] | None = None) -> CostGraph:
        """The problem with node cost ``time + memory_weight * memory`` (optionally a subgraph)."""
        keep = self.time.keys() if nodes is None else nodes
        costs = {n: self.time[n] + memory_weight * self.memory[n] for n in self.time if n in keep}
        edges = tuple(e for e in self.edges if e[0] in costs and e[1] in costs)
        return CostGraph(costs, edges)


def build_problem(
    graph: OpGraph,
    topology: Topology,
    mode: str,
    comm: CommCost,
    *,
    space: SearchSpace = SearchSpace(),
    allow: StrategyFilter | None = None,
    ops: list[OpSpec] | None = None,
) -> SearchProblem:
    """Build the node costs and edges for ``ops`` (default: all ops of the graph)."""
    from taps_core.errors import InfeasibleError

    mesh = Mesh(topology.nodes, topology.gpus_per_node)
    resharder = Resharder(comm)
    train = mode == "train"
    ops = list(graph.ops) if ops is None else ops
    op_names = {op.name for op in ops}
    memo: dict[tuple, tuple[list[Strategy], list[OpCost], np.ndarray, np.ndarray]] = {}
    strategies: dict[str, list[Strategy]] = {}
    time: dict[str, np.ndarray] = {}
    memory: dict[str, np.ndarray] = {}
    op_costs: dict[str, list[OpCost]] = {}
    for op in ops:
        sig = op_signature(graph, op)
        if sig not in memo:
            strats = op_strategies(graph, op, mesh, space)
            if allow is not None:
                strats = [s for s in strats if allow(graph, op, s)]
            if not strats:
                sizes = ", ".join(f"{k}={v}" for k, v in graph.dim_sizes(op).items())
                raise InfeasibleError(
                    f"op {op.name}: no strategy splits its dims ({sizes}) over {mesh.inter} "
                    f"nodes x {mesh.intra} GPUs under these plan rules"
                )
            costs = [op_cost(graph, op, s, topology, mode) for s in strats]
            t = np.array([c.compute_s + sum(comm.seconds(p) for _, p in c.phases) for c in costs])
            m = np.array([c.memory.total for c in costs])
            memo[sig] = (strats, costs, t, m)
        strategies[op.name], op_costs[op.name], time[op.name], memory[op.name] = memo[sig]
    layouts: dict[str, list[Layout]] = {}
    edges: list[tuple[str, str, np.ndarray]] = []
    edge_memo: dict[tuple, np.ndarray] = {}
    emit_memo: dict[tuple, tuple[list[Layout], np.ndarray, np.ndarray]] = {}
    for op in ops:
        readers = [c for c in graph.consumers.get(op.output, ()) if c in op_names]
        if not readers:
            continue
        node = TENSOR_PREFIX + op.output
        sig = op_signature(graph, op)
        if sig not in emit_memo:
            emitted = [s.layout(op.output_letters) for s in strategies[op.name]]
            uniq = sorted(set(emitted))
            index = {lay: i for i, lay in enumerate(uniq)}
            select = np.full((len(emitted), len(uniq)), np.inf)
            select[np.arange(len(emitted)), [index[e] for e in emitted]] = 0.0
            emit_memo[sig] = (uniq, select, np.zeros(len(uniq)))
        uniq, select, zeros = emit_memo[sig]
        layouts[node] = uniq
        time[node] = zeros
        memory[node] = zeros
        edges.append((op.name, node, select))
        nbytes = graph.tensors[op.output].nbytes
        for reader in readers:
            rop = graph.op_by_name[reader]
            for pos, tname in enumerate(rop.inputs):
                if tname != op.output:
                    continue
                letters = rop.input_letters[pos]
                key = (op_signature(graph, op), op_signature(graph, rop), pos)
                if key not in edge_memo:
                    wanted = [s.layout(letters) for s in strategies[reader]]
                    edge_memo[key] = resharder.matrix(nbytes, uniq, wanted, train=train)
                edges.append((node, reader, edge_memo[key]))
    return SearchProblem(
        graph, topology, mesh, mode, strategies, layouts, time, memory, edges, op_costs
    )
