"""`python -m llm.engine.kernels [NAME ...]`: build the kernels now (llm.engine.kernels.build)."""

import sys

from llm.engine.kernels.build import main

sys.exit(main())
