"""The plan search: the planner (:mod:`~taps_core.search.planner`), the exact search without
stages (:mod:`~taps_core.search.flat`) and its memory bound, the pipeline search, the framework
configuration spaces (Megatron-LM, DeepSpeed) and the baselines TAPS is compared with."""
