"""Reference Code World Model of Acrobot-v1, written by hand from the environment's documented dynamics: two links
of 1 m and 1 kg hanging from a fixed joint, torque -1, 0 or +1 on the joint between them, the Sutton & Barto book
equations of motion integrated with one classic Runge-Kutta (RK4) step over dt = 0.2 s in float64. Angles are
wrapped to [-pi, pi] and the angular velocities bounded to +-4 pi and +-9 pi after the step. Reward -1 per step and
0 on the step that ends the episode: the free end rises more than one link length above the fixed joint,
-cos(theta1) - cos(theta1 + theta2) > 1. The observation is (cos theta1, sin theta1, cos theta2, sin theta2,
theta1', theta2') in float32; `set_state` recovers the angles with atan2."""
import math
import numpy as np

DT = 0.2
LINK_LENGTH_1 = 1.0
LINK_MASS_1, LINK_MASS_2 = 1.0, 1.0
LINK_COM_1, LINK_COM_2 = 0.5, 0.5      # distance of each link's centre of mass from its joint
LINK_MOI = 1.0                        # moment of inertia of each link
GRAVITY = 9.8
MAX_VEL_1, MAX_VEL_2 = 4 * math.pi, 9 * math.pi
TORQUES = (-1.0, 0.0, 1.0)


def derivatives(s, torque):
    "d/dt of (theta1, theta2, theta1', theta2') under `torque` (book dynamics)."
    th1, th2, w1, w2 = s
    m1, m2, l1, c1, c2, inertia = LINK_MASS_1, LINK_MASS_2, LINK_LENGTH_1, LINK_COM_1, LINK_COM_2, LINK_MOI
    d1 = m1 * c1 ** 2 + m2 * (l1 ** 2 + c2 ** 2 + 2 * l1 * c2 * math.cos(th2)) + 2 * inertia
    d2 = m2 * (c2 ** 2 + l1 * c2 * math.cos(th2)) + inertia
    phi2 = m2 * c2 * GRAVITY * math.cos(th1 + th2 - math.pi / 2)
    phi1 = (-m2 * l1 * c2 * w2 ** 2 * math.sin(th2) - 2 * m2 * l1 * c2 * w2 * w1 * math.sin(th2)
            + (m1 * c1 + m2 * l1) * GRAVITY * math.cos(th1 - math.pi / 2) + phi2)
    acc2 = ((torque + d2 / d1 * phi1 - m2 * l1 * c2 * w1 ** 2 * math.sin(th2) - phi2)
            / (m2 * c2 ** 2 + inertia - d2 ** 2 / d1))
    acc1 = -(d2 * acc2 + phi1) / d1
    return np.array([w1, w2, acc1, acc2])


def wrap_angle(x):
    "x moved into [-pi, pi] by whole turns."
    while x > math.pi: x -= 2 * math.pi
    while x < -math.pi: x += 2 * math.pi
    return x


class Environment:
    def __init__(self):
        self.state = np.zeros(4)   # theta1, theta2, theta1', theta2' (float64)

    def set_state(self, obs):
        c1, s1, c2, s2, w1, w2 = (float(v) for v in obs)
        self.state = np.array([math.atan2(s1, c1), math.atan2(s2, c2), w1, w2])

    def observation(self):
        th1, th2, w1, w2 = self.state
        return np.array([math.cos(th1), math.sin(th1), math.cos(th2), math.sin(th2), w1, w2], dtype=np.float32)

    def step(self, action):
        torque = TORQUES[int(action)]
        s, h = self.state, DT
        k1 = derivatives(s, torque)
        k2 = derivatives(s + h / 2 * k1, torque)
        k3 = derivatives(s + h / 2 * k2, torque)
        k4 = derivatives(s + h * k3, torque)
        th1, th2, w1, w2 = s + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        self.state = np.array([wrap_angle(th1), wrap_angle(th2),
                               min(max(w1, -MAX_VEL_1), MAX_VEL_1), min(max(w2, -MAX_VEL_2), MAX_VEL_2)])
        th1, th2 = self.state[0], self.state[1]
        done = bool(-math.cos(th1) - math.cos(th1 + th2) > 1.0)
        return self.observation(), (0.0 if done else -1.0), done
