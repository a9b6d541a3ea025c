"""Our C++ CPU kernels (torch custom operators in torch.ops.llm_kernels), compiled on the
machine that runs them.

- `paged_attention.cpp`: decode attention read in place from the paged KV cache
  (llm.engine.attention).
- `row_ops.cpp`: RMSNorm, residual add + RMSNorm and silu(gate) * up, one operator each
  (llm.engine.row_ops).

`build` compiles them against the installed torch into build/kernels/, keyed by a hash of the
source, torch's version and the flags, so a changed source or torch builds afresh and a stale
library is never loaded; `load` loads one (building it when missing).
"""
