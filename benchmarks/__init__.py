"""Side-by-side benchmarks of actorbus and its baselines: ``python -m benchmarks``."""

from ._harness import Comparison, Profile, Result, Scenario, Skip
from ._suite import SCENARIOS, main

__all__ = ["SCENARIOS", "Comparison", "Profile", "Result", "Scenario", "Skip", "main"]
