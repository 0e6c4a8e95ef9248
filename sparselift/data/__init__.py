"""Data layer for benchmarks and quality runs.

* :mod:`~sparselift.data.batch` - the :class:`Batch` record every source yields.
* :mod:`~sparselift.data.synthetic` - deterministic, rank-sliceable synthetic Criteo-shaped data with
  Zipf-skewed ids and a planted learnable click signal.
* :mod:`~sparselift.data.criteo_tsv` - streaming reader for the real Criteo Kaggle/Terabyte TSV files.
* :mod:`~sparselift.data.movielens` - MovieLens-100k as a CTR task (real data, fetched by `make data`
  through :mod:`~sparselift.data.movielens_fetch`); imported by name, not from here.
"""

from sparselift.data.batch import Batch
from sparselift.data.criteo_tsv import CriteoTSV
from sparselift.data.synthetic import (
    DLRM_V2_POOLING,
    KAGGLE_CARDINALITIES,
    NUM_DENSE,
    TERABYTE_CARDINALITIES,
    SyntheticConfig,
    SyntheticCriteo,
    zipf_ranks,
)

__all__ = [
    "DLRM_V2_POOLING",
    "KAGGLE_CARDINALITIES",
    "NUM_DENSE",
    "TERABYTE_CARDINALITIES",
    "Batch",
    "CriteoTSV",
    "SyntheticConfig",
    "SyntheticCriteo",
    "zipf_ranks",
]
