"""What one report is rendered from: the run's command, configuration, machine and results."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.bandwidth_sweep import SweepResult
from benchmarks.config import BenchConfig
from benchmarks.figures import FigureFile
from benchmarks.pipelining import PipelineRow
from benchmarks.plan_quality import QualityResult
from benchmarks.search_speed import SpeedResult


@dataclass
class RunResults:
    """One benchmark run's inputs to the report; a section left out of the run is ``None``."""

    command: str
    config: BenchConfig
    environment: dict[str, object]
    load_average_end: tuple[float, float, float] | None
    wall_s: float
    quality: QualityResult | None
    speed: SpeedResult | None
    sweeps: list[SweepResult] | None
    figures: dict[str, FigureFile]
    pipelining: list[PipelineRow] | None = None
