def transition(state, action):
    """Turning and moving on a grid: the agent turns in place and moves forward unless something solid is ahead."""
    agent = get_entities_by_name(state, "Agent")[0]
    rest = [e for e in state if e is not agent]
    dx, dy = agent.direction
    x, y, direction = agent.x, agent.y, agent.direction
    if action == "turn left":
        direction = (dy, -dx)
    elif action == "turn right":
        direction = (-dy, dx)
    elif action == "move forward":
        ahead = get_entities_by_position(rest, x + dx, y + dy)
        if not any(e.name in ("Wall", "Key", "Ball", "Box") for e in ahead):
            x, y = x + dx, y + dy
    rest.append(Agent(x, y, direction=direction, carrying=agent.carrying))
    return rest
