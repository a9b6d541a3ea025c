"""Our C++ CPU kernels (torch custom operators), compiled on the machine that runs them.

`paged_attention.cpp` is decode attention read in place from the paged KV cache
(llm.engine.attention). `build` compiles it against the installed torch into build/kernels/,
keyed by a hash of the source, torch's version and the flags, so a changed source or torch
builds afresh and a stale library is never loaded.
"""
