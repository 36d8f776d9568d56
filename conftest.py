"""Collection rules for the whole checkout: the package's doctests run everywhere but
in modules that need CuPy, which are collected only where CuPy imports."""

import importlib.util

collect_ignore_glob = ["workflow/scripts/*", ".whl/*", ".snakemake/*"]
if importlib.util.find_spec("cupy") is None:
    collect_ignore_glob += ["workflow/volsweep/*/_gpu.py"]
