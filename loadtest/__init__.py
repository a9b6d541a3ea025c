"""Locust load tests for the `embed` ensemble on Triton: users, traffic shapes and an SLO verdict.

`loadtest/locustfile.py` is what locust loads; `python -m loadtest.run` (behind `make
loadtest`) runs it headless against a local Triton and judges the reports.
"""
