"""A fresh draw of N mutants of the functions changed since 9015a28, at HEAD, leaving out
the names in EXCLUDE (a file, one a line), seeded (tests/README.md):

    python tests/mutation/fresh_draw.py SEED N EXCLUDE > NAMES

The profile's files as tests/mutation/recent.toml names them; mutants named as mutmut 3
names them (`mutmut results`)."""
import fnmatch
import random
import re
import subprocess
import sys
from pathlib import Path

import tomllib
from mutmut.mutation.file_mutation import mutate_file_contents

sys.path.insert(0, str(Path(__file__).parent))
from changed_functions import changed_functions  # noqa: E402


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def mutant_names() -> list[str]:
    config = tomllib.loads(Path("tests/mutation/recent.toml").read_text())["tool"]["mutmut"]
    names = []
    for path in git("ls-tree", "-r", "--name-only", "HEAD", "msexp").split():
        if (path.endswith(".py") and path not in config["do_not_mutate"]
                and any(fnmatch.fnmatch(path, g) for g in config["only_mutate"])):
            module = path[:-3].replace("/", ".").removesuffix(".__init__")
            made = mutate_file_contents(path, git("show", f"HEAD:{path}"))
            names += [f"{module}.{name}" for name in made.mutant_names]
    return names


def main(seed: int, count: int, exclude: set[str]) -> None:
    changed = changed_functions("9015a28", "HEAD")
    match = re.compile("|".join(f"^{re.escape(f)}__mutmut_" for f in changed))
    pool = sorted(n for n in mutant_names() if match.search(n) and n not in exclude)
    print(*random.Random(seed).sample(pool, count), sep="\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), set(Path(sys.argv[3]).read_text().split()))
