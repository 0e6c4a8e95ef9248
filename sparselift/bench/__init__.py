"""Benchmarks: `kernels` (generated C kernels vs FBGEMM TBE vs torch EmbeddingBag), and the
end-to-end training comparisons. Submodules import torch lazily so `sparselift --help` stays fast."""
