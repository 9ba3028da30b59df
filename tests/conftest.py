from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# CI runs a fixed, modest number of examples; `HYPOTHESIS_PROFILE=soak` runs more.
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "soak", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
