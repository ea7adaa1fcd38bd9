"""The tiers built into silt-core: ``file://`` (:mod:`silt.tiers.file`) and ``memory://``
(:mod:`silt.tiers.memory`).

Each module registers its scheme through the ``silt_register`` hook exactly as a third-party tier
package would; other schemes (``s3://``, ``gs://``, ``az://``) live in their own distributions.
"""
