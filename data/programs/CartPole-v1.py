"""Reference Code World Model of CartPole-v1, written by hand from the physics of the environment (explicit Euler,
tau = 0.02 s). It reproduces every transition of the shipped replay buffer (accuracy 1.0 with
cwm_nb.cwm.evaluate_program). Used by the inference-speed experiment (nbs/24_llm_simulator.ipynb), the tests, the
benchmarks and the README's planning check."""
import math
import numpy as np

GRAVITY, MASSCART, MASSPOLE = 9.8, 1.0, 0.1
TOTAL_MASS = MASSCART + MASSPOLE
HALF_LENGTH = 0.5
POLEMASS_LENGTH = MASSPOLE * HALF_LENGTH
FORCE_MAG, TAU = 10.0, 0.02
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4

class Environment:
    def __init__(self):
        self.state = np.zeros(4)

    def set_state(self, obs):
        self.state = np.asarray(obs, dtype=np.float64)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = FORCE_MAG if action == 1 else -FORCE_MAG
        c, s = math.cos(theta), math.sin(theta)
        temp = (force + POLEMASS_LENGTH * theta_dot ** 2 * s) / TOTAL_MASS
        theta_acc = (GRAVITY * s - c * temp) / (HALF_LENGTH * (4.0 / 3.0 - MASSPOLE * c ** 2 / TOTAL_MASS))
        x_acc = temp - POLEMASS_LENGTH * theta_acc * c / TOTAL_MASS
        x, x_dot = x + TAU * x_dot, x_dot + TAU * x_acc
        theta, theta_dot = theta + TAU * theta_dot, theta_dot + TAU * theta_acc
        self.state = np.array([x, x_dot, theta, theta_dot])
        done = bool(x < -X_LIMIT or x > X_LIMIT or theta < -THETA_LIMIT or theta > THETA_LIMIT)
        return self.state.astype(np.float32), 1.0, done
