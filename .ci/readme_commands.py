"""Print README's quick-start commands: `example` (first) or `test` (second)."""

import re
import sys
from pathlib import Path

text = Path(__file__).resolve().parent.parent.joinpath("README.md").read_text()
section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
commands = [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]
if len(commands) != 2 or any("\n" in c for c in commands):
    sys.exit("README's Quick start must hold exactly two one-line bash commands")
print(commands[{"example": 0, "test": 1}[sys.argv[1]]])
