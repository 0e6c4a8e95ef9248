"""Built-in example models for ``sparselift export --model NAME`` and the benchmarks.

- ``dlrm-kaggle``, ``dlrm-terabyte``, ``dlrm-bench``: the DLRM reference architecture
  (:mod:`sparselift.models.dlrm`);
- ``two-tower``: a retrieval model with two embedding owners (:mod:`sparselift.models.two_tower`);
- ``torchrec-ebc``: an unsharded TorchRec ``EmbeddingBagCollection`` + ``KeyedJaggedTensor``
  (:mod:`sparselift.models.torchrec_ebc`; imports torchrec only when built);
- ``din``: a DIN-style sequence model, unpooled ``nn.Embedding`` lookups of a jagged history
  (:mod:`sparselift.models.din`; `sparselift bench seq`).

Not in the registry: :mod:`sparselift.models.movielens`, the two MovieLens-100k models on TorchRec
modules (`bench quality --data movielens-100k`, `examples/movielens_dlrm.py`), sized by the data.

Each factory returns ``(model, example_inputs)``; see :func:`build` and ``docs/export-notes.md``
for how they export.
"""

from sparselift.models.registry import DEFAULT_BATCH_SIZE, MODELS, build, dynamic_shapes, load_user_factory

__all__ = ["DEFAULT_BATCH_SIZE", "MODELS", "build", "dynamic_shapes", "load_user_factory"]
