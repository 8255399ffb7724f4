"""Step 0: a plain training loop, no Determined API yet (it only borrows the log format).

It fits y = 3x by gradient descent on one weight and prints its progress.
"""

import logging

import determined as det

STEPS = 50


def main() -> None:
    weight, rate = 0.0, 0.1
    for step in range(1, STEPS + 1):
        x = step % 5 + 1
        grad = 2 * (weight * x - 3 * x) * x / 25
        weight -= rate * grad
        if step % 10 == 0:
            logging.info(f"step {step}: weight {weight:.4f}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    main()
