"""`mgit.toml`, the committed repository config: models, tests, merge strategies.

    [models.base]
    path = "models/base.safetensors"
    type = "bert"

    [models.sentiment]
    path = "models/sentiment.safetensors"
    type = "bert"
    parents = ["base"]
    creation = "train.finetune:sentiment"     # module:callable in this repository
    independent = ["classifier.*"]            # tensor groups a merge may change independently
    architecture = "nets:Classifier"          # builds the torch module (else: state dicts)

    [types.bert]
    architecture = "nets:Bert"                # for every model of this type

    [groups.glue]                             # an MTL group: one function makes all members
    models = ["sst2", "mnli"]
    creation = "train.mtl:glue"               # returns {member name: model}

    [tests.accuracy]
    function = "checks:accuracy"
    types = "bert"                            # regex on model types (or `models`, on names)
    pass = "accuracy >= 0.9"

    [merge]
    "classifier.*" = "theirs"

    [checks]
    allow-nonfinite = ["debug/*.safetensors"]  # paths whose tensors may hold NaN or infinity

Edits go through tomlkit so a user's comments and layout survive. This
module only reads and writes the declarations: nothing here imports or runs
the callables (only runtime commands do).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import tomlkit
import tomlkit.exceptions

from git_mgit.errors import MgitError

FILE_NAME = "mgit.toml"
# The keys each kind of table may hold: a misspelt key is an error, not silently ignored.
_KEYS = {
    "models": {"path", "type", "parents", "creation", "independent", "architecture"},
    "tests": {"function", "models", "types", "pass"},
    "groups": {"models", "creation"},
    "types": {"architecture"},
}
_CALLABLE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_NAME = re.compile(r"[A-Za-z0-9][\w.+-]*")
_CONDITION = re.compile(r"\s*([A-Za-z_][\w.]*)\s*(>=|<=|==|!=|>|<)\s*(-?[\d.]+(?:e-?\d+)?)\s*")


class ConfigError(MgitError):
    """mgit.toml is malformed or an edit to it is invalid."""


@dataclass(frozen=True)
class ModelDecl:
    name: str
    path: str
    type: str | None = None
    parents: tuple[str, ...] = ()
    creation: str | None = None
    independent: tuple[str, ...] = ()  # glob patterns: groups that do not depend on the rest
    architecture: str | None = None  # module:callable building its torch module


@dataclass(frozen=True)
class GroupDecl:
    """Models created together by one function (multi-task learning shares their weights)."""

    name: str
    models: tuple[str, ...]
    creation: str | None


@dataclass(frozen=True)
class TestDecl:
    name: str
    function: str
    models: str | None = None  # regex over model names
    types: str | None = None  # regex over model types
    condition: str | None = None  # "metric >= value [and ...]"

    def applies_to(self, name: str | None, type_: str | None) -> bool:
        if self.models is not None:
            return name is not None and re.fullmatch(self.models, name) is not None
        if self.types is not None:
            return type_ is not None and re.fullmatch(self.types, type_) is not None
        return True


@dataclass
class RepoConfig:
    path: Path
    doc: tomlkit.TOMLDocument = field(default_factory=tomlkit.document)

    @property
    def models(self) -> dict[str, ModelDecl]:
        out = {}
        for name, t in self.doc.get("models", {}).items():
            out[name] = ModelDecl(
                name,
                str(t.get("path", "")),
                t.get("type"),
                tuple(t.get("parents", ())),
                t.get("creation"),
                tuple(str(p) for p in t.get("independent", ())),
                t.get("architecture"),
            )
        return out

    @property
    def tests(self) -> dict[str, TestDecl]:
        return {
            name: TestDecl(name, t["function"], t.get("models"), t.get("types"), t.get("pass"))
            for name, t in self.doc.get("tests", {}).items()
        }

    @property
    def merge(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.doc.get("merge", {}).items()}

    @property
    def groups(self) -> dict[str, GroupDecl]:
        return {
            name: GroupDecl(name, tuple(str(m) for m in t.get("models", ())), t.get("creation"))
            for name, t in self.doc.get("groups", {}).items()
        }

    def group_of(self, model: str) -> GroupDecl | None:
        return next((g for g in self.groups.values() if model in g.models), None)

    def architecture(self, model: ModelDecl) -> str | None:
        """The model's own `architecture`, else its type's (`[types.TYPE]`)."""
        if model.architecture:
            return model.architecture
        kind = self.doc.get("types", {}).get(model.type or "", {})
        return kind.get("architecture") if isinstance(kind, dict) else None

    @property
    def allow_nonfinite(self) -> list[str]:
        return [str(p) for p in self.doc.get("checks", {}).get("allow-nonfinite", [])]

    def model_at(self, path: str) -> ModelDecl | None:
        return next((m for m in self.models.values() if m.path.rstrip("/") == path), None)

    def folders(self) -> list[str]:
        """Declared model folders (paths ending in '/')."""
        return [m.path.rstrip("/") for m in self.models.values() if m.path.endswith("/")]

    def types(self) -> dict[str, str]:
        return {m.path.rstrip("/"): m.type for m in self.models.values() if m.type}

    # -- edits ------------------------------------------------------------------

    def _table(self, section: str, name: str) -> tomlkit.items.Table:
        top = self.doc.setdefault(section, tomlkit.table(is_super_table=True))
        if name not in top:
            top[name] = tomlkit.table()
        return top[name]

    def register_model(
        self,
        name: str,
        path: str,
        type_: str | None = None,
        parents: list[str] | None = None,
        creation: str | None = None,
    ) -> None:
        _check_name(name)
        if creation is not None:
            _check_callable(creation)
        t = self._table("models", name)
        t["path"] = path
        for key, value in (("type", type_), ("parents", parents), ("creation", creation)):
            if value is not None:
                t[key] = value

    def register_creation_function(self, model: str, creation: str) -> None:
        """Attach `module:callable` to a model declared here."""
        _check_callable(creation)
        if model not in self.models:
            raise ConfigError(
                f"{self.path}: no model named {model!r}; declare it with "
                f"`git mgit lineage add-node --name {model} ...` first"
            )
        self._table("models", model)["creation"] = creation

    def register_test(
        self,
        name: str,
        function: str,
        models: str | None = None,
        types: str | None = None,
        condition: str | None = None,
    ) -> None:
        _check_name(name)
        _check_callable(function)
        if models is not None and types is not None:
            raise ConfigError("a test applies to models by name or by type, not both")
        for pattern in (models, types):
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ConfigError(f"bad regular expression {pattern!r}: {exc}") from exc
        if condition is not None:
            parse_condition(condition)
        t = self._table("tests", name)
        t.clear()
        t["function"] = function
        for key, value in (("models", models), ("types", types), ("pass", condition)):
            if value is not None:
                t[key] = value

    def deregister_test(self, name: str) -> None:
        tests = self.doc.get("tests", {})
        if name not in tests:
            raise ConfigError(f"{self.path}: no test named {name!r}")
        del tests[name]

    def save(self) -> None:
        self.path.write_text(tomlkit.dumps(self.doc), encoding="utf-8")


def parse_condition(text: str) -> list[tuple[str, str, float]]:
    """'accuracy >= 0.9 and loss < 2' -> [(metric, operator, value), ...]; never eval()."""
    terms = []
    for part in re.split(r"\band\b", text):
        m = _CONDITION.fullmatch(part)
        if m is None:
            raise ConfigError(
                f"pass condition {text!r}: write comparisons like 'accuracy >= 0.9', joined by 'and'"
            )
        try:
            terms.append((m.group(1), m.group(2), float(m.group(3))))
        except ValueError as exc:
            raise ConfigError(f"pass condition {text!r}: {m.group(3)!r} is not a number") from exc
    return terms


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{name!r} is not a valid name (letters, digits, '.', '_', '+', '-')")


def _check_callable(ref: str) -> None:
    if not _CALLABLE.fullmatch(ref):
        raise ConfigError(f"{ref!r} is not a 'module:callable' reference (e.g. train:finetune)")


def load(worktree: Path | None) -> RepoConfig:
    """mgit.toml at the worktree root (empty if absent); a parse error names the line."""
    path = (worktree or Path.cwd()) / FILE_NAME
    if not path.exists():
        return RepoConfig(path)
    try:
        doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    except tomlkit.exceptions.ParseError as exc:
        raise ConfigError(f"{path}: {exc}; fix the file and retry") from exc
    for section in ("models", "tests", "merge", "checks", "types", "groups"):
        if section in doc and not isinstance(doc[section], dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
    for name, t in doc.get("tests", {}).items():
        if not isinstance(t, dict) or "function" not in t:
            raise ConfigError(f"{path}: [tests.{name}] needs function = 'module:callable'")
        if "pass" in t:
            try:
                parse_condition(str(t["pass"]))
            except ConfigError as exc:
                raise ConfigError(f"{path}: [tests.{name}] {exc}") from exc
    for name, t in doc.get("models", {}).items():
        if not isinstance(t, dict) or "path" not in t:
            raise ConfigError(f"{path}: [models.{name}] needs path = '...'")
    for name, t in doc.get("groups", {}).items():
        if not isinstance(t, dict) or not t.get("models"):
            raise ConfigError(f"{path}: [groups.{name}] needs models = ['a', 'b', ...]")
        unknown = [m for m in t["models"] if m not in doc.get("models", {})]
        if unknown:
            raise ConfigError(
                f"{path}: [groups.{name}] names undeclared models: {', '.join(unknown)}"
            )
    for section, allowed in _KEYS.items():
        for name, t in doc.get(section, {}).items():
            extra = sorted(set(t) - allowed) if isinstance(t, dict) else []
            if extra:
                raise ConfigError(
                    f"{path}: [{section}.{name}] has unknown key(s) {', '.join(extra)}; "
                    f"known: {', '.join(sorted(allowed))}"
                )
    return RepoConfig(path, doc)
