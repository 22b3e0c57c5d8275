"""Reference Code World Model of MountainCar-v0, written by hand from the environment's documented dynamics: a car on
the curve y = sin(3 x); action 0 pushes left, 1 does nothing, 2 pushes right. One step:
velocity += (action - 1) * 0.001 - 0.0025 * cos(3 * position), clipped to [-0.07, 0.07]; position += velocity,
clipped to [-1.2, 0.6]; at the left wall (position == -1.2) a negative velocity becomes 0 (an inelastic
collision). Reward -1 on every step, the last one included; the episode ends when position >= 0.5 and
velocity >= 0. Computed in float64; the observation (position, velocity) is float32."""
import math
import numpy as np

MIN_POSITION, MAX_POSITION = -1.2, 0.6
MAX_SPEED = 0.07
GOAL_POSITION, GOAL_VELOCITY = 0.5, 0.0
FORCE, GRAVITY = 0.001, 0.0025


class Environment:
    def __init__(self):
        self.position, self.velocity = -0.5, 0.0

    def set_state(self, obs):
        self.position, self.velocity = float(obs[0]), float(obs[1])

    def step(self, action):
        velocity = self.velocity + (int(action) - 1) * FORCE - GRAVITY * math.cos(3 * self.position)
        velocity = min(max(velocity, -MAX_SPEED), MAX_SPEED)
        position = min(max(self.position + velocity, MIN_POSITION), MAX_POSITION)
        if position == MIN_POSITION and velocity < 0:
            velocity = 0.0
        self.position, self.velocity = position, velocity
        done = bool(position >= GOAL_POSITION and velocity >= GOAL_VELOCITY)
        return np.array([position, velocity], dtype=np.float32), -1.0, done
