"""The preflight's answer: sections of printed lines, and the problems that would stop or kill the run."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Section:
    title: str
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdict: str = ""  # what "ok" means here (the time limit: how a job makes progress)

    def line(self, text: str) -> None:
        self.lines.append(text)

    def fail(self, text: str) -> None:
        self.problems.append(text)

    def note(self, text: str) -> None:
        self.notes.append(text)


@dataclass
class Report:
    run_name: str
    allocation: str
    sections: list[Section] = field(default_factory=list)

    def section(self, title: str) -> Section:
        self.sections.append(Section(title))
        return self.sections[-1]

    @property
    def problems(self) -> list[str]:
        return [f"{s.title}: {p}" for s in self.sections for p in s.problems]

    @property
    def ok(self) -> bool:
        return not self.problems

    def text(self) -> str:
        out = [f"[preflight] {self.run_name} on {self.allocation}"]
        for s in self.sections:
            out += [f"== {s.title}: " + ("FAIL" if s.problems else "ok" + (f": {s.verdict}" if s.verdict else "")),
                    *(f"   {x}" for x in s.lines), *(f"   note: {x}" for x in s.notes),
                    *(f"   PROBLEM: {x}" for x in s.problems)]
        return "\n".join([*out, f"[preflight] {self.run_name}: " + ("would start and reach its checkpoints" if self.ok
                          else f"{len(self.problems)} problem(s); fix before submitting")])
