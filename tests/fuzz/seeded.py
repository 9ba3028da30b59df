"""Running a fuzz target: its seeds written to an empty corpus folder (the
first folder on the command line), then atheris."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import atheris

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable


def run(one_input: Callable[[bytes], Any], seeds: Iterable[bytes]) -> None:
    corpus = [a for a in sys.argv[1:] if not a.startswith("-")]
    for folder in corpus[:1]:
        os.makedirs(folder, exist_ok=True)
        if not os.listdir(folder):
            for i, seed in enumerate(seeds):
                with open(os.path.join(folder, f"seed-{i:03d}"), "wb") as f:
                    f.write(seed)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
