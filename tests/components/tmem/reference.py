"""y = 2 x: the reference of the tensor-memory hand-over test link."""


def double(inputs, facts):
    return {"drain.y": 2.0 * inputs["fill.x"].double()}
