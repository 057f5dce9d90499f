"""References for the test links under tests/components."""


def relayout(inputs, facts):
    """y = 2 x: the emit side reads its tile in its own layout and doubles it."""
    return {"emit.y": 2.0 * inputs["load.x"].double()}
