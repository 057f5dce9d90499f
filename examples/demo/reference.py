"""References for the demo kernel (examples/demo/link.toml, [verify]).

Inputs and outputs are keyed 'instance.operand'; facts are the link's resolved facts."""

import torch


def tile_fold(inputs, facts):
    """The slow reference: float64 sums of each row's tile_cols-wide column blocks."""
    x = inputs["load.x"].double()
    m, k = x.shape
    n = facts["tile_cols"]
    return {"store.y": x.view(m, k // n, n).sum(dim=1)}


def tile_fold_torch(inputs, facts):
    """What a torch user would write (fp32 sum, bf16 out): the baseline timed beside the kernel."""
    x = inputs["load.x"]
    m, k = x.shape
    n = facts["tile_cols"]
    return {"store.y": x.view(m, k // n, n).sum(dim=1).to(torch.bfloat16)}
