"""The workflow's rule steps: one function per Snakemake rule, called by its thin script.

One module per stage, as the rules: :mod:`~volsweep.steps.ingest`,
:mod:`~volsweep.steps.sweep`, :mod:`~volsweep.steps.thickness`,
:mod:`~volsweep.steps.summary` and :mod:`~volsweep.steps.figures`;
:mod:`~volsweep.steps.runner` runs one step with its log and its GPU.  Each
step reads its inputs, calls the pure-array cores and writes its outputs
atomically (temporary name, then rename), so a killed job leaves no
half-written file.  A store is named by its folder or by its root
``zarr.json`` (the file the rules declare).
"""
