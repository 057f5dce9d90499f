"""References for examples/block_reduce: the sum of each tile of x."""


def tile_sums(inputs, facts):
    """The slow reference: float64 sums."""
    return {"sum.out": inputs["load.x"].double().view(-1, facts["tile"]).sum(dim=1)}


def tile_sums_torch(inputs, facts):
    """What a torch user would write: the baseline timed beside the kernel."""
    return {"sum.out": inputs["load.x"].view(-1, facts["tile"]).sum(dim=1)}
