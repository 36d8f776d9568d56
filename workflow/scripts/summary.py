# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import summary as step
from volsweep.steps.runner import run_script

run_script(step.summarize, snakemake, paths=list(snakemake.input), names=snakemake.params.names,
           out_nc=snakemake.output[0])
