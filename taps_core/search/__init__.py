"""Searches over the outer space of a training run (how many ways TP, PP and DP split it, and
with which memory levers), on top of the intra-operator search of
:mod:`taps_core.search.flat`."""
