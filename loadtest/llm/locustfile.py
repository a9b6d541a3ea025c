"""Locust load test for the generative `llm` model: streaming users with TTFT, ITL and
end-to-end latency as locust requests (loadtest/llm/users.py).

Headless, bounded, with reports and an SLO verdict:  make loadtest-llm
Web UI (with a server from `make serve`):             .venv/bin/locust -f loadtest/llm/locustfile.py
The options, reports and success latencies are the embedding locustfile's (imported below
as a module, so its embedding users are not this file's users).
"""

from __future__ import annotations

import loadtest.locustfile  # noqa: F401 - registers the load options and the report listeners
from loadtest.llm.users import LlmStreamUser  # noqa: F401 - locust picks the user class up from this module
from loadtest.shapes import SelectedShape  # noqa: F401 - and the load shape (--shape)
