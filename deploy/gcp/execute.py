"""Running a Plan through gcloud so that a re-run converges.

For each step: refuse it when its guard says so; with a probe, describe the resource first and run the update
(or nothing) when it exists, the create when it does not; facts (project number, function URLs, the sink's writer
identity) are looked up the first time a command needs them. A failure stops the run with a StepError naming the
step, the command, what gcloud said and what to do; finished steps are found and left alone by the next run.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from deploy.gcp.steps import ITEM, Argv, Fact, Plan, Step, resolve

OUTPUT_TAIL = 1500
LOCAL_STACK_VARIABLES = (
    "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE",
    "CLOUDSDK_AUTH_DISABLE_CREDENTIALS",
    "CLOUDSDK_CORE_PROJECT",
    "PUBSUB_EMULATOR_HOST",
    "FIRESTORE_EMULATOR_HOST",
    "STORAGE_EMULATOR_HOST",
    "LANDFALL_VERTEX_ENDPOINT",
)
"""What .landfall/env sets to point gcloud and the clients at the local stack; never passed to a deployment."""


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


class Gcloud(Protocol):
    def __call__(self, argv: Sequence[str]) -> Result: ...


class StepError(RuntimeError):
    """A step failed; the message names it and says what to do."""


@dataclass(frozen=True)
class Outcome:
    """What happened to one step: created, updated, unchanged (exists, nothing to update), skipped (absent, in a
    teardown), kept (refused by its guard)."""

    step: Step
    action: str
    detail: str = ""


def run_gcloud(cwd: Path, timeout_s: float = 3600) -> Gcloud:
    """A Gcloud that runs the real CLI from cwd (staged paths are relative to it), never prompting."""
    env = {k: v for k, v in os.environ.items() if k not in LOCAL_STACK_VARIABLES}
    env["CLOUDSDK_CORE_DISABLE_PROMPTS"] = "1"

    def call(argv: Sequence[str]) -> Result:
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            done = subprocess.run(list(argv), cwd=cwd, env=env, stdout=out, stderr=err, timeout=timeout_s, check=False)
            out.seek(0)
            err.seek(0)
            return Result(done.returncode, out.read(), err.read())

    return call


@dataclass
class Executor:
    plan: Plan
    gcloud: Gcloud
    report: Callable[[str], None] = print
    known: dict[str, str] = field(default_factory=dict)

    def fact(self, name: str) -> str:
        if name not in self.known:
            fact: Fact = next(f for f in self.plan.facts if f.name == name)
            result = self.gcloud(fact.lookup)
            value = result.stdout.strip()
            if result.returncode != 0 or not value:
                raise StepError(
                    f"could not read {fact.about}: `{shlex.join(fact.lookup)}` exited "
                    f"{result.returncode}: {_tail(result.stderr)}\n  What to do: check that `gcloud auth "
                    "list` shows an active account that may read the project, and that the step creating "
                    "it ran; then run the same command again."
                )
            self.known[name] = value
        return self.known[name]

    def argv(self, args: Argv) -> list[str]:
        names = {name for arg in args if not isinstance(arg, str) for name in arg.facts}
        return resolve(args, {name: self.fact(name) for name in names})

    def run_step(self, index: int, step: Step) -> Outcome:
        if step.guard is not None:
            checked = self.gcloud(step.guard.argv)
            if checked.returncode == 0 and step.guard.refuse(checked.stdout):
                return Outcome(step, "kept", step.guard.message)
        if step.for_each:
            return self.run_each(index, step)
        exists = None
        if step.probe:
            probed = self.gcloud(self.argv(step.probe))
            exists = probed.returncode == 0 and (step.found is None or step.found(probed.stdout))
            for probe in step.also_probe if exists else ():
                exists = exists and self.gcloud(self.argv(probe)).returncode == 0
        if exists:
            if step.if_found is None:
                return Outcome(step, "unchanged")
            command, action = step.if_found, ("deleted" if not step.run_if_missing else "updated")
        elif exists is False and not step.run_if_missing:
            return Outcome(step, "skipped", "already gone")
        else:
            command, action = step.command, "created"
        argv = self.argv(command)
        result = self.gcloud(argv)
        if result.returncode != 0:
            raise self.failure(index, step, argv, result)
        return Outcome(step, action)

    def run_each(self, index: int, step: Step) -> Outcome:
        """Run step.command once for every item its probe lists."""
        listing = self.argv(step.probe)
        listed = self.gcloud(listing)
        if listed.returncode != 0:
            raise self.failure(index, step, listing, listed)
        items = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
        for item in items:
            argv = [arg.replace(ITEM, item) for arg in self.argv(step.command)]
            result = self.gcloud(argv)
            if result.returncode != 0:
                raise self.failure(index, step, argv, result)
        return Outcome(step, "done", ", ".join(items)) if items else Outcome(step, "skipped", "none listed")

    def failure(self, index: int, step: Step, argv: Sequence[str], result: Result) -> StepError:
        remedy = f" {step.remedy}" if step.remedy else ""
        return StepError(
            f"step {index}/{len(self.plan.steps)} failed: {step.name}.\n  command: {shlex.join(argv)}\n  exit status "
            f"{result.returncode}: {_tail(result.stderr or result.stdout)}\n  What to do: fix the cause above, "
            f"then run the same command again: steps already done are found and left as they are.{remedy}"
        )

    def run(self) -> list[Outcome]:
        outcomes = []
        for index, step in enumerate(self.plan.steps, 1):
            outcome = self.run_step(index, step)
            self.report(
                f"[{index}/{len(self.plan.steps)}] {outcome.action:9} {step.name}"
                + (f": {outcome.detail}" if outcome.detail else "")
            )
            outcomes.append(outcome)
        return outcomes


def _tail(text: str) -> str:
    text = " ".join(text.strip().split())
    return text if len(text) <= OUTPUT_TAIL else "..." + text[-OUTPUT_TAIL:]
