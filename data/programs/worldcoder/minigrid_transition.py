def transition(state, action):
    """MiniGrid's dynamics on the whole grid: turning, moving, picking up, dropping and toggling.

    `state` is a list of entities (Agent, Wall, Goal, Lava, Key, Ball, Box, Door); returns the next list."""
    agent = get_entities_by_name(state, "Agent")[0]
    rest = [e for e in state if e is not agent]
    dx, dy = agent.direction
    fx, fy = agent.x + dx, agent.y + dy
    front = get_entities_by_position(rest, fx, fy)
    x, y, direction, carrying = agent.x, agent.y, agent.direction, agent.carrying
    if action == "turn left":
        direction = (dy, -dx)
    elif action == "turn right":
        direction = (-dy, dx)
    elif action == "move forward":
        if all(can_overlap(e) for e in front):
            x, y = fx, fy
    elif action == "pick up":
        if carrying is None and len(front) == 1 and front[0].name in ("Key", "Ball", "Box"):
            obj = front[0]
            rest.remove(obj)
            carrying = type(obj)(None, None, color=obj.color)
    elif action == "drop":
        if carrying is not None and not front:
            rest.append(type(carrying)(fx, fy, color=carrying.color))
            carrying = None
    elif action == "toggle":
        for obj in front:
            if obj.name == "Door":
                rest.remove(obj)
                if obj.is_locked:
                    if carrying is not None and carrying.name == "Key" and carrying.color == obj.color:
                        obj = Door(obj.x, obj.y, color=obj.color, is_open=True, is_locked=False)
                else:
                    obj = Door(obj.x, obj.y, color=obj.color, is_open=not obj.is_open, is_locked=False)
                rest.append(obj)
            elif obj.name == "Box":
                rest.remove(obj)   # a box is replaced by its (empty) contents
    rest.append(Agent(x, y, direction=direction, carrying=carrying))
    return rest


def can_overlap(obj):
    """Whether the agent may step onto a cell holding `obj`."""
    if obj.name == "Door":
        return obj.is_open
    return obj.name in ("Goal", "Lava")
