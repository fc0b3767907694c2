"""Studies as data: a study is a folder under experiments/ with a `study.toml`, and optionally a
`hook.py` beside it for a figure or table the generic report cannot draw.

    experiments/<name>/study.toml
      [study]
      title = "Routing on the Azure conversation trace"
      order = 5                    # place in `infralab reproduce` (then by name)
      hypotheses = ["hypothesis.toml"]   # relative to this folder
      confirm = false              # true: also run the next rung (a real run) after the first decision
      chart = true                 # generic report: a chart of the first criterion's metric per arm

    A fidelity study (the simulator against the real engine, infralab.agent.fidelity) names its
    study file instead of hypotheses:
      fidelity = "quick.toml"      # relative to this folder; `reproduce --quick` applies its [quick]

    A study of the cost model against public measurements (infralab.agent.public_points) names its
    points file:
      measurements = "points.toml" # relative to this folder

    experiments/<name>/hook.py     # optional
      def report(results: list[TestResult], out: Path) -> tuple[list[str], str]:
          # figures written under out/figures (paths relative to out) and the study's Markdown

A study whose question is not one hypothesis file's arms (e.g. a rate search per arm of stacked
config overlays, experiments/glm_stack) leaves `hypotheses` out and is decided by its hook:

      def run(out: Path, quick: bool) -> HookRun:
          # writes its files under out (figures under out/figures) and returns the verdict

The two contracts are the Protocols `DecidingHook` and `ReportingHook`; `deciding_hook(study)` and
`reporting_hook(study)` load a study's hook as one (an InputError names the file when it lacks the
function its study needs).

The hook is loaded by file path (`load_hook`), so it works wherever experiments/ lives.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, cast
from pydantic.dataclasses import dataclass as pydantic_dataclass

from infralab.config_io import STRICT, load_toml, validate
from infralab.errors import InputError
from infralab.field_types import Bool, Int
from infralab.locations import experiments_dir

STUDY_FILE = "study.toml"
HOOK_FILE = "hook.py"


@pydantic_dataclass(frozen=True, config=STRICT)
class StudyTable:
    title: str
    # What decides the study: hypothesis files, one fidelity study file (agent/fidelity), or, with
    # neither, the study's hook.py (`run`, HookRun).
    hypotheses: tuple[str, ...] = ()
    fidelity: str | None = None
    measurements: str | None = None  # a public-measurements points file (agent/public_points)
    confirm: Bool = False
    chart: Bool = True
    order: Int(ge=-1_000_000, le=1_000_000) = 1000


@pydantic_dataclass(frozen=True, config=STRICT)
class StudyFile:
    study: StudyTable


@dataclass(frozen=True)
class HookRun:
    """What a study decided by its hook returns: the verdict (infralab.agent.findings' words), the
    claim it decides, the command that reproduces it, figures (relative to the report folder) and
    the study's Markdown."""

    verdict: str
    claim: str
    command: str
    figures: tuple[str, ...]
    markdown: str


@dataclass(frozen=True)
class Study:
    """One study: its folder's name, title, hypothesis files (absolute) and report options."""

    name: str
    title: str
    hypotheses: tuple[Path, ...]
    confirm: bool
    chart: bool
    order: int
    folder: Path
    fidelity: Path | None = None
    measurements: Path | None = None

    @property
    def hook_path(self) -> Path | None:
        path = self.folder / HOOK_FILE
        return path if path.is_file() else None


def load_study(folder: Path) -> Study:
    """Read and check `folder/study.toml` (InputError names the file and field)."""
    path = folder / STUDY_FILE
    spec = validate(StudyFile, load_toml(path), str(path)).study
    deciders = [name for name, value in (("hypotheses", spec.hypotheses), ("fidelity", spec.fidelity),
                                         ("measurements", spec.measurements)) if value]
    if len(deciders) > 1:
        raise InputError(f"{path}: study.{deciders[0]}", f"given together with study.{deciders[1]}",
                         "one of: hypothesis files, one fidelity study file, one measurements file")
    fidelity = _study_file(folder, path, "fidelity", spec.fidelity, "a fidelity study TOML")
    measurements = _study_file(folder, path, "measurements", spec.measurements, "a public-measurements points TOML")
    files = []
    for i, name in enumerate(spec.hypotheses):
        file = (folder / name).resolve()
        if not file.is_file():
            raise InputError(f"{path}: study.hypotheses[{i}]", f"{name!r} is not a file",
                             "a hypothesis TOML, relative to the study folder")
        files.append(file)
    if not files and fidelity is None and measurements is None and not (folder / HOOK_FILE).is_file():
        raise InputError(f"{path}: study.hypotheses", "missing, and the study has no fidelity file, measurements file or hook.py",
                         "hypothesis files, one fidelity study file, one measurements file, or a hook.py whose run(out, quick) decides the study")
    return Study(folder.name, spec.title, tuple(files), spec.confirm, spec.chart, spec.order, folder, fidelity,
                 measurements)


def _study_file(folder: Path, path: Path, field: str, name: str | None, what: str) -> Path | None:
    """The study's `field` file, resolved against its folder (None when not given)."""
    if name is None:
        return None
    file = (folder / name).resolve()
    if not file.is_file():
        raise InputError(f"{path}: study.{field}", f"{name!r} is not a file", f"{what}, relative to the study folder")
    return file


def discover_studies(root: Path | None = None) -> list[Study]:
    """Every folder of `root` (default `experiments_dir()`) holding a study.toml, by (order, name)."""
    root = experiments_dir() if root is None else root
    studies = [load_study(p.parent) for p in sorted(root.glob(f"*/{STUDY_FILE}"))]
    return sorted(studies, key=lambda s: (s.order, s.name))


class DecidingHook(Protocol):
    """A study decided by its hook (no hypothesis files): `run` writes its files under `out`
    (figures under out/figures) and returns the verdict."""

    def run(self, out: Path, quick: bool) -> HookRun: ...


class ReportingHook(Protocol):
    """A study of hypothesis files whose hook draws what the generic report cannot: its figures
    (paths relative to `out`) and Markdown."""

    def report(self, results: list[Any], out: Path) -> tuple[list[str], str]: ...


def deciding_hook(study: Study) -> DecidingHook:
    """The hook that decides `study`; InputError naming its file when it has none or no `run`."""
    module = load_hook(study.hook_path) if study.hook_path is not None else None
    if module is None or not callable(getattr(module, "run", None)):
        where = study.hook_path or study.folder / HOOK_FILE
        raise InputError(str(where), "does not define run(out, quick)" if module is not None else "is missing",
                         "a study hook: def run(out: Path, quick: bool) -> HookRun (agent/studies.py)")
    return cast(DecidingHook, module)


def reporting_hook(study: Study) -> ReportingHook | None:
    """The hook that draws `study`'s report, or None (the generic report)."""
    module = load_hook(study.hook_path) if study.hook_path is not None else None
    if module is None or not hasattr(module, "report"):
        return None
    if not callable(module.report):
        raise InputError(f"{study.hook_path}: report", "is not a function",
                         "def report(results: list[TestResult], out: Path) -> tuple[list[str], str]")
    return cast(ReportingHook, module)


def load_hook(path: Path) -> ModuleType:
    """The Python file at `path` as a module. One module per file and process (as `import` gives),
    so that its types stay the same object however often it is loaded."""
    path = path.resolve()
    name = "infralab_hook_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(str(path), "cannot be loaded as Python", "a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: dataclasses look their module up while being built
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
