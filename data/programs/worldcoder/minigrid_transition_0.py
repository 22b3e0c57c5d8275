def transition(state, action):
    """A first guess: the agent turns in place and always moves one cell forward."""
    agent = get_entities_by_name(state, "Agent")[0]
    rest = [e for e in state if e is not agent]
    dx, dy = agent.direction
    x, y, direction = agent.x, agent.y, agent.direction
    if action == "turn left":
        direction = (dy, -dx)
    elif action == "turn right":
        direction = (-dy, dx)
    elif action == "move forward":
        x, y = x + dx, y + dy
    rest.append(Agent(x, y, direction=direction, carrying=agent.carrying))
    return rest
