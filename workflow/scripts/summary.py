# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep import pipeline
from volsweep.runner import run_script

run_script(pipeline.summarize, snakemake, paths=list(snakemake.input), names=snakemake.params.names,
           out_nc=snakemake.output[0])
