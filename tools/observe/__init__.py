"""What a running server reports: statistics deltas, Prometheus metrics in the terminal,
padding counters, and the alert rules for the Prometheus Operator.
"""
