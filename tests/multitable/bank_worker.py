"""Run as a separate process: transfers between ``checking`` and ``savings`` until
``seconds`` have passed, each logged before it starts (``begin id account
amount``) and after it is acknowledged (``ok id txn_id``) or failed
(``fail id``), so a SIGKILL leaves at most one transfer whose outcome the log
does not tell."""

from __future__ import annotations

import random
import sys
import time

from caslake.errors import CommitConflict
from tests.multitable.bank import open_pair, random_transfer, transfer


def main() -> None:
    checking_uri, savings_uri, seed, seconds, log_path = sys.argv[1:6]
    checking, savings = open_pair((checking_uri, savings_uri), None)
    rng = random.Random(int(seed))
    stop = time.monotonic() + float(seconds)
    n = 0
    with open(log_path, "a", buffering=1) as log:
        while time.monotonic() < stop:
            t = random_transfer(rng)
            tid = f"{seed}-{n}"
            n += 1
            log.write(f"begin {tid} {t.account} {t.amount}\n")
            try:
                done = transfer(checking, savings, rng, t, ttl_ms=1_000)
            except CommitConflict:
                log.write(f"fail {tid}\n")
                continue
            log.write(f"ok {tid} {done.txn_id}\n")


if __name__ == "__main__":
    main()
