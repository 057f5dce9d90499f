"""pipelink inside code someone else wrote: routes from model libraries' modules to linked kernels."""
