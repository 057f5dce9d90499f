"""docs/tutorial.md: what each link must compute, in torch (inputs and outputs by instance.operand)."""


def scale_pair(inputs, facts):
    return {"scale.y": 2 * inputs["load.x"]}


def sum_pair(inputs, facts):
    tiles = inputs["load.x"].view(facts["N"] // facts["tile"], facts["tile"])
    return {"sum.out": tiles.double().sum(dim=1).float()}
