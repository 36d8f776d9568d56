# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import figures
from volsweep.steps.runner import run_script

run_script(figures.plot_orientation_distribution, snakemake, sweep_nc=snakemake.input[0],
           out_png=snakemake.output[0], name=snakemake.wildcards.vol)
