"""Shared by the tests of: Dockerfile, deploy/kubernetes/, deploy/compose.yaml."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


@dataclass
class Instruction:
    keyword: str  # upper-cased: FROM, RUN, COPY, ...
    args: str  # the rest of the (joined) line
    stage: int  # index of the FROM it belongs to (-1 before the first FROM)

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form instruction, else None."""
        text = self.args.strip()
        if not text.startswith("["):
            return None
        return json.loads(text)

    def words(self) -> list[str]:
        form = self.exec_form()
        return form if form is not None else shlex.split(self.args)


def parse_dockerfile(path: Path = DOCKERFILE) -> list[Instruction]:
    """Dockerfile instructions, line continuations joined and comments dropped."""
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(keyword, args.strip(), stage))
    assert not pending, "Dockerfile ends with a line continuation"
    return instructions


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def one(instructions: list[Instruction], keyword: str) -> Instruction:
    found = [i for i in instructions if i.keyword == keyword]
    assert len(found) == 1, f"expected one {keyword} in the final stage, found {len(found)}"
    return found[0]
