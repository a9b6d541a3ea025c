"""Locust `LoadTestShape` classes over the profiles in `loadtest/profiles.py`;
`--users` is the peak and `--run-time` the length of the run."""

from __future__ import annotations

from locust import LoadTestShape

from loadtest import profiles


class ProfileShape(LoadTestShape):
    abstract = True
    use_common_options = True  # --users, --spawn-rate and --run-time keep their meaning
    profile = staticmethod(profiles.steady)

    def tick(self) -> tuple[int, float] | None:
        return profiles.tick_at(self.profile, self.get_run_time(), profiles.params_from_options(self.runner.environment.parsed_options))


class SteadyShape(ProfileShape):
    profile = staticmethod(profiles.steady)


class StepShape(ProfileShape):
    profile = staticmethod(profiles.step)


class BurstShape(ProfileShape):
    profile = staticmethod(profiles.burst)


class WaveShape(ProfileShape):
    profile = staticmethod(profiles.wave)


class SelectedShape(LoadTestShape):
    """The one shape the locustfile exposes: runs the profile named by `--shape`, read on
    every tick, so the web UI's field applies too. (Locust would otherwise just take the
    first shape class it finds.)"""

    use_common_options = True

    def tick(self) -> tuple[int, float] | None:
        options = self.runner.environment.parsed_options
        return profiles.tick_at(profiles.PROFILES[options.shape], self.get_run_time(), profiles.params_from_options(options))
