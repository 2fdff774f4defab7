"""Steps of a deployment: one gcloud command each, with how to tell whether its resource already exists.

A Step's `command` is what runs on an empty project, and what the dry run prints. With a `probe` (a describe or
list command), the executor first asks whether the resource exists: found, it runs `if_found` (an update, or
nothing when None); missing, it runs `command`, unless `run_if_missing` is False (teardown: nothing to delete).

Some argument values are known only in a live project: its number, a function's URL, the log sink's writer
identity. Those are `Later` templates over named facts; the dry run fills them with the documented value
(`Fact.predicted`), the executor with what `Fact.lookup` prints once the step that creates it has run.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from string import Formatter

ITEM = "ITEM"
"""In a for_each step's command: where each listed item goes."""


@dataclass(frozen=True)
class Later:
    """An argument with {fact} fields, filled in when the command runs, e.g. `--member={sink_writer}`."""

    template: str

    @property
    def facts(self) -> tuple[str, ...]:
        return tuple(name for _, name, _, _ in Formatter().parse(self.template) if name)

    def resolve(self, facts: Mapping[str, str]) -> str:
        return self.template.format_map(facts)


Arg = str | Later
Argv = tuple[Arg, ...]


@dataclass(frozen=True)
class Fact:
    """A value only the project knows. predicted: the documented value the dry run shows; lookup: a gcloud
    command printing it (stdout, stripped); about: what it is, for the dry run's comment."""

    name: str
    predicted: str
    lookup: tuple[str, ...]
    about: str


@dataclass(frozen=True)
class Guard:
    """Refuse a step: run `argv`; when `refuse(stdout)` holds, stop with `message` instead of running the step."""

    argv: tuple[str, ...]
    refuse: Callable[[str], bool]
    message: str


@dataclass(frozen=True)
class Step:
    """One gcloud command and how to converge it.

    name: what the step does, as failures name it. section: the heading it is printed under.
    probe: exit status 0 (and `found(stdout)` when given) means the resource exists; also_probe: more probes that
    must all answer 0 as well (one resource in several places, e.g. an image in each region's repository).
    if_found: what runs when it exists (None: leave it alone). run_if_missing: False for teardown steps.
    guard: a check that can refuse the step. remedy: what to do when the step fails.
    for_each: the probe lists items, one a line; `command` runs once for each, with ITEM replaced by it (nothing
    runs when the list is empty). The dry run prints the command with ITEM and names the listing.
    """

    name: str
    command: Argv
    section: str = ""
    probe: Argv = ()
    found: Callable[[str], bool] | None = field(default=None, compare=False)
    also_probe: tuple[Argv, ...] = ()
    if_found: Argv | None = None
    run_if_missing: bool = True
    guard: Guard | None = None
    remedy: str = ""
    for_each: bool = False

    def argvs(self) -> tuple[Argv, ...]:
        """Every gcloud command this step may run (command, probe, update), for checks of their syntax."""
        return tuple(a for a in (self.command, self.probe, *self.also_probe, self.if_found) if a)


@dataclass(frozen=True)
class Plan:
    """An ordered deployment (or teardown): the steps, the facts they use and what the dry run says first."""

    title: str
    steps: tuple[Step, ...]
    facts: tuple[Fact, ...] = ()
    preamble: tuple[str, ...] = ()

    def predicted(self) -> dict[str, str]:
        return {fact.name: fact.predicted for fact in self.facts}


def resolve(argv: Sequence[Arg], facts: Mapping[str, str]) -> list[str]:
    return [arg.resolve(facts) if isinstance(arg, Later) else arg for arg in argv]


def dry_run_text(plan: Plan) -> str:
    """The plan as a bash script: one complete gcloud command per line (shell-quoted), `#` comments between."""
    facts = plan.predicted()
    lines = [f"# {plan.title}", *(f"# {line}" if line else "#" for line in plan.preamble)]
    used = {
        name
        for step in plan.steps
        for argv in step.argvs()
        for arg in argv
        if isinstance(arg, Later)
        for name in arg.facts
    }
    for fact in plan.facts:
        if fact.name in used:
            lines.append(
                f"# {fact.about}: {fact.predicted} here; when deploying, what `{shlex.join(fact.lookup)}` prints."
            )
    section = None
    for step in plan.steps:
        if step.section != section:
            section = step.section
            lines += ["", f"# --- {section}"]
        lines.append(f"# {step.name}")
        if step.for_each:
            lines.append(f"# for each {ITEM} that `{shlex.join(resolve(step.probe, facts))}` lists:")
        lines.append(shlex.join(resolve(step.command, facts)))
    return "\n".join(lines) + "\n"
