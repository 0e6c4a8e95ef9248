"""SparseLift: a compiler for the sparse path of recommendation-model training.

Import-light on purpose: `sparselift.ir`, `sparselift.passes` and `sparselift-opt` never import
torch. The torch-facing API (`sparselift.export`, `sparselift.compile`, ...) lives in
`sparselift.frontend` and `sparselift.runtime`.
"""

__version__ = "0.1.0"
