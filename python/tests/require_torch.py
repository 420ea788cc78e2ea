"""Runs the command given as arguments if torch (and scikit-learn, which the DDP example uses)
can be imported by this Python; otherwise prints why and exits 77, CTest's SKIP_RETURN_CODE.
    /usr/bin/python3 python/tests/require_torch.py build/chorus-run -n 4 ...
"""

import importlib
import os
import sys

SKIP_RETURN_CODE = 77


def main():
    for module in ("torch", "sklearn"):
        try:
            importlib.import_module(module)
        except ImportError:
            print(f"SKIP: {module} is not installed for {sys.executable}", flush=True)
            return SKIP_RETURN_CODE
    if len(sys.argv) < 2:
        print("usage: require_torch.py command [args...]", file=sys.stderr)
        return 2
    os.execvp(sys.argv[1], sys.argv[1:])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
